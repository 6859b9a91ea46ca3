"""What the persistent trainer's start costs a run, launched at the first update or when the run starts.

    python bench/trainer_start.py [--rounds 3]

The default update launcher (`accelerate`) starts a trainer process group once per run. Its start
(an interpreter importing torch, transformers and accelerate, the process group, the model) is
launched right after prepare (`pipeline.trainer_client.prelaunch_trainer`) so that it can run beside
θ_0's evaluation and iteration 0's sampling. This bench runs the tiny preset (grpo, 2 iterations,
plain loop) three ways, interleaved with the order turned every round: `in_process`, the trainer
launched at the first update (prelaunch switched off), and prelaunched; it prints, per way, the
median wall time from the start of the run to the end of iteration 0 and of iteration 1, and the
ratios to in process.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from iteration import bench_overrides  # noqa: E402  (bench/iteration.py)

WAYS = ("in_process", "at_first_update", "prelaunched")


def one_run(way: str) -> tuple[float, float]:
    from thinking_seeds.config import load_config
    from thinking_seeds.store.run_dir import RunDir

    loop = importlib.import_module("thinking_seeds.pipeline.loop")
    real = loop.prelaunch_trainer
    if way == "at_first_update":
        loop.prelaunch_trainer = lambda run, cfg: None
    overrides = bench_overrides("grpo", "in_process" if way == "in_process" else "accelerate", 2)
    base = Path(tempfile.mkdtemp(prefix="ts-start-"))
    try:
        t0 = time.time()
        run = loop.train(RunDir.for_run("start", base), load_config("tiny", overrides))
        end0 = run.manifest_path(0, "evaluate").stat().st_mtime
        return end0 - t0, run.manifest_path(1, "evaluate").stat().st_mtime - end0
    finally:
        loop.prelaunch_trainer = real
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    res: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
    for r in range(a.rounds):
        for way in WAYS[r % 3 :] + WAYS[: r % 3]:
            first, second = one_run(way)
            res[way].append((first, second))
            print(f"round {r} {way}: start..end of iteration 0 {first:.2f} s, iteration 1 {second:.2f} s", flush=True)
    base0 = statistics.median(x for x, _ in res["in_process"])
    base1 = statistics.median(y for _, y in res["in_process"])
    print(f"\nmedians of {a.rounds} rounds (tiny, grpo, plain loop, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']})")
    for way, v in res.items():
        first, second = statistics.median(x for x, _ in v), statistics.median(y for _, y in v)
        print(
            f"{way:16} start..end of iteration 0 {first:6.2f} s ({first / base0:.2f}x in process), "
            f"iteration 1 {second:5.2f} s ({second / base1:.2f}x)"
        )


if __name__ == "__main__":
    main()
