"""Wall time of one training iteration on the tiny preset, split into the work and the overhead.

    python bench/iteration.py [--iterations 5] [--methods grpo,thinking_seeds] [--no-prefect]

For each method it runs `train_flow` (Prefect, no server) with the in-process update launcher and
again with the `accelerate launch` subprocess launcher, then reads the stage timings the run wrote:

  generation      sampling time of the seeds and continuation stages (model forward passes)
  fwd/bwd         the update's forward/backward/optimizer time (thinking_seeds.train.trainer, perf/fwd_bwd_s)
  verification    math-verify time of the verify stage (and of the seeds' draft rewards)
  everything else iteration wall time minus the three above: Prefect task orchestration, process
                  launches, model loading/saving, Parquet I/O, log-prob bookkeeping

Iteration wall time is measured between the manifests of consecutive iterations (the end of
iteration k-1's last stage to the end of iteration k's), so the one-off costs of a run — Prefect's
temporary server, data generation, θ_0 — are reported separately as `startup`. Evaluation is
switched off except a 1-sample check at the end (it is not part of an iteration's work).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def stage_seconds(run, k: int) -> dict[str, float]:
    out = {"generation": 0.0, "fwd_bwd": 0.0, "verification": 0.0}
    for stage in ("snapshot", "seeds", "continuation", "verify", "update", "evaluate"):
        m = run.read_manifest(k, stage)
        if m is None:
            continue
        out["generation"] += m.seconds.get("generation", 0.0) if stage in ("seeds", "continuation") else 0.0
        out["verification"] += m.seconds.get("verification", 0.0)
        out["fwd_bwd"] += m.metrics.get("perf/fwd_bwd_s", 0.0) if stage == "update" else 0.0
    return out


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def iteration_walls(run, n: int) -> list[float]:
    ends = [run.manifest_path(k, "evaluate").stat().st_mtime for k in range(n)]
    return [b - a for a, b in itertools.pairwise(ends)]


def bench(method: str, launcher: str, iterations: int, prefect: bool, base: Path) -> dict:
    from thinking_seeds.config import load_config
    from thinking_seeds.store.run_dir import RunDir

    overrides = [
        f"algorithm={method}",
        f"iterations={iterations}",
        f"update.launcher={launcher}",
        f"eval.every={iterations + 1}",
        "eval.prompts=1",
        "eval.samples=1",
        "eval.seeded=false",
    ]
    run_id = f"bench-{method}-{launcher}"
    os.environ["TS_RUNS_DIR"] = str(base)
    t0 = time.perf_counter()
    t_wall0 = time.time()
    if prefect:
        from thinking_seeds.flows.train import train_flow

        train_flow(preset="tiny", run_id=run_id, overrides=overrides)
    else:
        from thinking_seeds.pipeline.loop import train

        train(RunDir.for_run(run_id, base), load_config("tiny", overrides))
    total = time.perf_counter() - t0
    run = RunDir.for_run(run_id, base)
    walls = iteration_walls(run, iterations)
    parts = [stage_seconds(run, k) for k in range(1, iterations)]
    wall = mean(walls)
    row = {k: mean([p[k] for p in parts]) for k in parts[0]}
    row["everything_else"] = wall - sum(row.values())
    row["iteration_wall"] = wall
    # Everything before iteration 0 starts (Prefect start-up, data, θ_0 and its evaluation).
    row["startup"] = run.manifest_path(-1, "evaluate").stat().st_mtime - t_wall0
    row["total"] = total
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--methods", default="grpo,thinking_seeds")
    ap.add_argument("--launchers", default="in_process,accelerate")
    ap.add_argument("--no-prefect", action="store_true", help="plain loop instead of the Prefect flow")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ts-bench-"))
    results = {}
    try:
        for method in a.methods.split(","):
            for launcher in a.launchers.split(","):
                results[(method, launcher)] = bench(method, launcher, a.iterations, not a.no_prefect, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
        f"{'plain loop' if a.no_prefect else 'Prefect flow (no server)'}"
    )
    print(f"per-iteration wall time (mean of iterations 1..{a.iterations - 1}), seconds")
    hdr = (
        f"{'method':16} {'launcher':11} {'iteration':>9} {'generation':>10} {'fwd/bwd':>8} "
        f"{'verify':>7} {'else':>7} {'else %':>7}"
    )
    print(hdr)
    for (m, launcher), r in results.items():
        else_share = 100 * r["everything_else"] / r["iteration_wall"]
        print(
            f"{m:16} {launcher:11} {r['iteration_wall']:9.2f} {r['generation']:10.2f} {r['fwd_bwd']:8.2f} "
            f"{r['verification']:7.2f} {r['everything_else']:7.2f} {else_share:6.1f}%"
        )
    for m in a.methods.split(","):
        if (m, "in_process") in results and (m, "accelerate") in results:
            ip, ac = results[(m, "in_process")], results[(m, "accelerate")]
            print(
                f"{m}: accelerate launcher costs {ac['iteration_wall'] - ip['iteration_wall']:+.2f} s per iteration "
                f"(ratio {ac['iteration_wall'] / ip['iteration_wall']:.2f}x of in-process)"
            )
    startups = ", ".join(f"{m}/{launcher} {r['startup']:.1f}" for (m, launcher), r in results.items())
    print("one-off startup per run (s): " + startups)
    if a.json:
        a.json.write_text(json.dumps({f"{m}/{launcher}": r for (m, launcher), r in results.items()}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
