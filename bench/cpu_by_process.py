"""Where an iteration's CPU goes, process by process: Thinking Seeds against GRPO in the Prefect flow.

    python bench/cpu_by_process.py [--rounds 3] [--iterations 6] [--no-prefect]

For each round it trains the tiny preset once per method (interleaved, the order turned each round;
bench/iteration.py's settings: the persistent trainer, evaluation off but a 1-sample check) and reads
the CPU time (user + system) of every process of the run's tree at the end of iteration 0 and at the
end of the last iteration: this process (the orchestrator: stages, engine, the drafts sampled beside
the update, Prefect's client), Prefect's temporary server, the persistent trainer, the verifier's
worker pool. It prints each class's CPU seconds per iteration (medians over rounds) and the ratio
Thinking Seeds / GRPO per class. Iteration wall time: the same window, divided by its iterations.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

import thinking_seeds.flows  # noqa: F401  (first: Prefect's defaults as `ts train` sets them)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from iteration import bench_overrides  # noqa: E402  (bench/ is not a package)

from thinking_seeds.store.run_dir import RunDir  # noqa: E402


def process_class(p: psutil.Process) -> str:
    """What a process of the run's tree is, from its command line."""
    if p.pid == os.getpid():
        return "orchestrator"
    cmd = " ".join(p.cmdline())
    if "multiprocessing" in cmd:
        return "workers"  # the verifier's pool (and multiprocessing's resource tracker)
    if "uvicorn" in cmd or ("prefect" in cmd and "server" in cmd):
        return "prefect server"
    if "trainer" in cmd or "accelerate" in cmd:
        return "trainer"
    return "other"


def tree_cpu() -> dict[int, tuple[str, float]]:
    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[p.pid] = (process_class(p), t.user + t.system)
        except psutil.Error:
            pass
    return out


def one_run(method: str, base: Path, iterations: int, prefect: bool, tag: str) -> tuple[float, dict[str, float]]:
    """(wall s, {class: CPU s}) per iteration, from the end of iteration 0 to the end of the last."""
    from thinking_seeds.config import load_config

    run_id = f"{method}-{tag}"
    run = RunDir.for_run(run_id, base)
    marks: dict[int, tuple[float, dict]] = {}
    stop = threading.Event()
    last = iterations - 1

    def watch() -> None:  # the last stage's manifest of iteration k marks its end
        while not stop.is_set():
            for k in (0, last):
                if k not in marks and run.manifest_path(k, "evaluate").exists():
                    marks[k] = (time.perf_counter(), tree_cpu())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    overrides = bench_overrides(method, "accelerate", iterations)
    os.environ["TS_RUNS_DIR"] = str(base)
    try:
        if prefect:
            from thinking_seeds.flows.train import train_flow

            train_flow(preset="tiny", run_id=run_id, overrides=overrides)
        else:
            from thinking_seeds.pipeline.loop import train

            train(run, load_config("tiny", overrides))
    finally:
        stop.set()
        watcher.join()
    (t0, first), (t1, end) = marks[0], marks[last]
    per: dict[str, float] = {}
    for pid, (cls, cpu) in end.items():
        per[cls] = per.get(cls, 0.0) + cpu - first.get(pid, (cls, 0.0))[1]
    shutil.rmtree(run.root, ignore_errors=True)
    return (t1 - t0) / last, {c: v / last for c, v in per.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--no-prefect", action="store_true", help="the plain loop instead of the Prefect flow")
    a = ap.parse_args()
    methods = ["grpo", "thinking_seeds"]
    rows: dict[str, list[tuple[float, dict[str, float]]]] = {m: [] for m in methods}
    base = Path(tempfile.mkdtemp(prefix="ts-bench-cpu-"))
    try:
        for r in range(a.rounds):
            for m in methods[r % 2 :] + methods[: r % 2]:
                wall, per = one_run(m, base, a.iterations, not a.no_prefect, f"r{r}")
                rows[m].append((wall, per))
                cells = ", ".join(f"{c} {v:.3f}" for c, v in sorted(per.items()))
                print(f"round {r} {m}: iteration {wall:.3f} s; CPU s per iteration: {cells}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"{'plain loop' if a.no_prefect else 'Prefect flow'}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    classes = sorted({c for m in methods for _, per in rows[m] for c in per})
    med = {m: {c: statistics.median(per.get(c, 0.0) for _, per in rows[m]) for c in classes} for m in methods}
    walls = {m: statistics.median(w for w, _ in rows[m]) for m in methods}
    print(f"per iteration, medians of {a.rounds} rounds (s)   {'grpo':>8} {'thinking_seeds':>15} {'ts/grpo':>8}")
    gw, tw = walls["grpo"], walls["thinking_seeds"]
    print(f"  {'wall':40} {gw:8.3f} {tw:15.3f} {tw / gw:7.3f}x")
    for c in classes:
        g, t = med["grpo"][c], med["thinking_seeds"][c]
        ratio = f"{t / g:7.3f}x" if g > 0.001 else "     n/a"
        print(f"  CPU {c:36} {g:8.3f} {t:15.3f} {ratio}")
    g, t = sum(med["grpo"].values()), sum(med["thinking_seeds"].values())
    print(f"  CPU {'all':36} {g:8.3f} {t:15.3f} {t / g:7.3f}x")


if __name__ == "__main__":
    main()
