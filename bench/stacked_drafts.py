"""The seeds stage's drafts with the pool members' weights stacked (one decode for every member,
engine/stacked.py) against a weight swap and an engine call per member: CPU seconds of the drafting
thread, the samples compared.

    OMP_NUM_THREADS=1 .venv/bin/python bench/stacked_drafts.py [--rounds 10] [--run DIR] [--iterations 8]

Without --run it first trains a Thinking Seeds run on the tiny preset (`--iterations`, the plain loop),
so that the pool holds its members (4 with the preset's pool.size=4 and snapshot_every=2 from iteration
6 on). Then, for the last iteration's seeds (its members, prompts and seeds, as the stage draws them),
each round drafts them both ways, the order turned every round: `stage_seeds.historical_rows`, the
function the seeds stage and the drafts sampled ahead call. Prints the median CPU seconds of each way,
the ratio stacked / swapped per round with its median, and whether both ways drafted the same tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]


def trained_run(root: Path, iterations: int) -> Path:
    ts = Path(sys.executable).with_name("ts")
    cmd = [str(ts), "--runs-dir", str(root), "train", "-r", "drafts", "--no-prefect"]
    cmd += ["-s", f"iterations={iterations}", "-s", "eval.every=1000"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"training the run failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return root / "drafts"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=8, help="of the run trained first (without --run)")
    ap.add_argument("--run", type=Path, help="an existing Thinking Seeds run directory to draft for")
    a = ap.parse_args()

    from thinking_seeds.engine.rollout import HFEngine
    from thinking_seeds.pipeline.session import Session, Timer
    from thinking_seeds.pipeline.stage_seeds import historical_rows
    from thinking_seeds.store.run_dir import RunDir

    with tempfile.TemporaryDirectory(prefix="ts-stacked-drafts-") as tmp:
        path = a.run or trained_run(Path(tmp), a.iterations)
        s = Session(RunDir(path))
        k = s.cfg.iterations - 1
        pool, members = s.pool_members(k)
        print(f"run {path}, seeds of iteration {k}: {len(members)} pool members, "
              f"{s.cfg.rollout.prompts_per_iteration} prompts")  # fmt: skip

        def drafts(stacked: bool) -> tuple[float, list]:
            HFEngine.batches_checkpoints = stacked  # the class's switch: LocalRollout asks the engine
            t0 = time.thread_time()
            rows = historical_rows(s, k, pool, members, Timer())
            return time.thread_time() - t0, [r.prefix_token_ids for r in rows]

        drafts(True), drafts(False)  # warm: the engine, the stack, the members read
        cpu = {True: [], False: []}
        tokens = {}
        for r in range(a.rounds):
            for stacked in (True, False) if r % 2 == 0 else (False, True):
                sec, tokens[stacked] = drafts(stacked)
                cpu[stacked].append(sec)
        HFEngine.batches_checkpoints = True
        ratios = [x / y for x, y in zip(cpu[True], cpu[False], strict=True)]
        n_tok = sum(len(t) for t in tokens[True])
        print(f"stacked: {statistics.median(cpu[True]):.3f} s CPU per seeds stage (median of {a.rounds})")
        print(f"swapped: {statistics.median(cpu[False]):.3f} s CPU per seeds stage")
        print("stacked / swapped per round: " + " ".join(f"{x:.3f}" for x in ratios))
        print(f"stacked / swapped: {statistics.median(ratios):.3f}x (median of per-round ratios)")
        same = sum(x == y for x, y in zip(tokens[True], tokens[False], strict=True))
        print(f"same seed tokens: {same}/{len(tokens[True])} seeds ({n_tok} tokens)")


if __name__ == "__main__":
    main()
