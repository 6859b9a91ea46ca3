"""Where the pipeline's own time goes in one iteration: Prefect, fsync, the checkpoint, the rest.

    python bench/orchestration.py [--iterations 6] [--rounds 2] [--methods grpo,thinking_seeds]

Issue #12's goal: orchestration (Prefect + I/O + manifests) <= 5% of an iteration. For each round
and method it runs the tiny preset through the Prefect flow (`train_flow`, no server) and through
the plain loop (`--no-prefect`), interleaved (the order turned every round), with the update in
process (so every cost below is in this process and can be timed here), and splits iterations
1..n-1 (bench/iteration.py's windows: between consecutive iterations' last manifests) into

  work            sampling (seeds + continuation) + the update's forward/backward/optimizer step +
                  verification (the stages' own timers, as in bench/iteration.py)
  prefect         per stage task: the flow's wall time around the task call minus the stage body's
                  wall time inside the task run (Prefect's task engine: state transitions, events,
                  its thread hand-off); flow only
  checkpoint      the trainer's save of θ_{k+1} and its optimizer state (save_checkpoint's wall
                  time, its own fsyncs included; printed apart below the table)
  fsync           the other os.fsync calls of this process inside the window (every manifest,
                  metrics and rollouts file and their folders: what makes a finished stage survive
                  a crash of the machine, not only of the process)
  rest            what is left: Parquet, sha256 of outputs, manifests, rows, Session set-up, metrics

Prints medians per iteration and each part's share of the iteration, then the flow/loop ratio per
round. Evaluation is off except a 1-sample check (not part of an iteration's work).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from iteration import bench_overrides, iteration_walls, stage_seconds  # noqa: E402  (bench/iteration.py)

# (end time, seconds) events of this process, summed per iteration window afterwards
FSYNCS: list[tuple[float, float]] = []  # every os.fsync
SAVES: list[tuple[float, float]] = []  # every checkpoint save of the trainer
PREFECT: list[tuple[float, float]] = []  # per stage task: the flow's call minus the stage body in it
_BODY: dict[tuple[str, int], float] = {}


def _timed(record: list[tuple[float, float]], fn):
    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            record.append((time.time(), time.perf_counter() - t))

    return wrapper


def instrument() -> None:
    """Time os.fsync, the trainer's checkpoint save and, per stage task, the flow's call and the
    stage body inside it."""
    os.fsync = _timed(FSYNCS, os.fsync)
    trainer = importlib.import_module("thinking_seeds.train.trainer")
    trainer.save_checkpoint = _timed(SAVES, trainer.save_checkpoint)
    flow_mod = importlib.import_module("thinking_seeds.flows.train")
    task_mod = importlib.import_module("thinking_seeds.tasks.stage_task")
    real_outcome, real_call = task_mod._outcome, flow_mod.call_stage

    def outcome(stage, run_dir, k, *a, **kw):
        t = time.perf_counter()
        try:
            return real_outcome(stage, run_dir, k, *a, **kw)
        finally:
            _BODY[stage, k] = time.perf_counter() - t

    def call(task, run, k, *a, **kw):
        t = time.perf_counter()
        out = real_call(task, run, k, *a, **kw)
        wall = time.perf_counter() - t
        PREFECT.append((time.time(), wall - _BODY.pop((task.name, k), wall)))
        return out

    task_mod._outcome, flow_mod.call_stage = outcome, call


def in_window(events: list[tuple[float, float]], start: float, end: float) -> float:
    return sum(s for t, s in events if start < t <= end)


def inside_saves(start: float, end: float) -> float:
    """fsync seconds spent inside a checkpoint save that ended in the window."""
    saves = [(t - s, t) for t, s in SAVES if start < t <= end]
    return sum(s for t, s in FSYNCS if any(a <= t <= b for a, b in saves))


def bench(method: str, prefect: bool, iterations: int, base: Path, tag: str) -> dict[str, list[float]]:
    from thinking_seeds.config import load_config
    from thinking_seeds.store.run_dir import RunDir

    overrides = bench_overrides(method, "in_process", iterations)
    run_id = f"orch-{method}-{'flow' if prefect else 'loop'}-{tag}"
    os.environ["TS_RUNS_DIR"] = str(base)
    for events in (FSYNCS, SAVES, PREFECT):
        events.clear()
    if prefect:
        from thinking_seeds.flows.train import train_flow

        train_flow(preset="tiny", run_id=run_id, overrides=overrides)
    else:
        from thinking_seeds.pipeline.loop import train

        train(RunDir.for_run(run_id, base), load_config("tiny", overrides))
    run = RunDir.for_run(run_id, base)
    walls = iteration_walls(run, iterations)
    ends = [run.manifest_path(k, "evaluate").stat().st_mtime for k in range(-1, iterations)]
    keys = ("iteration", "work", "prefect", "fsync", "checkpoint", "checkpoint_fsync", "rest")
    row: dict[str, list[float]] = {key: [] for key in keys}
    for k in range(1, iterations):
        work = sum(stage_seconds(run, k).values())
        start, end = ends[k], ends[k + 1]  # iteration k: after iteration k-1's last manifest
        ckpt, ckpt_fsync = in_window(SAVES, start, end), inside_saves(start, end)
        fs, pf = in_window(FSYNCS, start, end) - ckpt_fsync, in_window(PREFECT, start, end)
        wall = walls[k]
        for key, v in zip(keys, (wall, work, pf, fs, ckpt, ckpt_fsync, wall - work - pf - fs - ckpt), strict=True):
            row[key].append(v)
    shutil.rmtree(run.root, ignore_errors=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--methods", default="grpo,thinking_seeds")
    a = ap.parse_args()
    instrument()
    base = Path(tempfile.mkdtemp(prefix="ts-orch-"))
    modes = ["flow", "loop"]
    runs: dict[tuple[str, str], list[dict]] = {}
    try:
        for r in range(a.rounds):
            for method in a.methods.split(","):
                for mode in modes[r % 2 :] + modes[: r % 2]:
                    row = bench(method, mode == "flow", a.iterations, base, f"r{r}")
                    runs.setdefault((method, mode), []).append(row)
                    it = statistics.median(row["iteration"])
                    print(f"round {r} {method} {mode}: iteration {it:.2f} s", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, update in process"
    )
    print(f"per iteration, mean of {a.rounds * (a.iterations - 1)} iterations, s (share of the iteration)")
    cols = ("work", "prefect", "fsync", "checkpoint", "rest")
    print(f"{'method':16} {'mode':5} {'iteration':>9} " + " ".join(f"{c:>15}" for c in cols) + f" {'own cost':>15}")
    for (method, mode), rows in runs.items():
        pooled = {key: [x for row in rows for x in row[key]] for key in rows[0]}
        wall = statistics.fmean(pooled["iteration"])
        med = {c: statistics.fmean(pooled[c]) for c in cols}
        own = wall - med["work"]
        cells = " ".join(f"{med[c]:6.3f} ({100 * med[c] / wall:4.1f}%)" for c in cols)
        print(f"{method:16} {mode:5} {wall:9.3f} {cells} {own:6.3f} ({100 * own / wall:4.1f}%)")
    for (method, mode), rows in runs.items():
        inside = statistics.median([x for row in rows for x in row["checkpoint_fsync"]])
        print(f"{method} {mode}: of the checkpoint, fsync {inside:.3f} s")
    for method in a.methods.split(","):
        per_round = [
            statistics.median(f["iteration"]) / statistics.median(lp["iteration"])
            for f, lp in zip(runs[(method, "flow")], runs[(method, "loop")], strict=True)
        ]
        print(
            f"{method}: flow/loop iteration ratio {statistics.median(per_round):.3f}x "
            f"(per round: {', '.join(f'{x:.3f}' for x in per_round)})"
        )


if __name__ == "__main__":
    main()
