"""Where the update stage's time goes, per update launcher (plain loop, tiny preset).

    python bench/update_stage.py [--launchers in_process,accelerate] [--iterations 5] [--method grpo]

For each launcher one run of `--iterations` iterations; for iterations 1..n-1 (iteration 0 pays the
persistent trainer's launch) the medians of the update stage's wall time and of the trainer's own
split: loading/preparing (θ_k, the rollouts, the π_old recompute), forward/backward + optimizer,
saving θ_{k+1} (weights, optimizer state, sha256 manifest); the rest is the pipeline's side
(hand-over, checkpoint verification, manifest). It says how much a checkpoint write off the
critical path (issue #12, item 2) could win.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launchers", default="in_process,accelerate")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--method", default="grpo")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ts-bench-update-"))
    try:
        for i, launcher in enumerate(a.launchers.split(",")):
            overrides = [
                f"algorithm={a.method}",
                f"iterations={a.iterations}",
                f"update.launcher={launcher}",
                f"eval.every={a.iterations + 1}",
                "eval.prompts=1",
                "eval.samples=1",
                "eval.seeded=false",
            ]
            run = train(RunDir.for_run(f"u{i}-{launcher}", base), load_config("tiny", overrides))
            rows = []
            for k in range(1, a.iterations):
                m = run.read_manifest(k, "update")
                p = m.metrics
                rows.append((m.seconds["update_total"], p["perf/load_s"], p["perf/fwd_bwd_s"], p["perf/save_s"]))
            total, load, fwd, save = (statistics.median(c) for c in zip(*rows, strict=True))
            print(
                f"{launcher:22} update stage {total:.3f} s | trainer: load/prepare {load:.3f} fwd/bwd {fwd:.3f} "
                f"save {save:.3f} | rest (verify, manifest, hand-over) {total - load - fwd - save:.3f}",
                flush=True,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":  # the verifier's spawned workers import __main__
    main()
