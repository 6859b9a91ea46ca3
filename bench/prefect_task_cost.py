"""What one Prefect task run costs, against a thread doing the same nothing (the work sampled ahead of an
update: pipeline/run_lifecycle.sampled_ahead runs it in a thread, not a task run).

    python bench/prefect_task_cost.py [--tasks 40] [--rounds 3]

Inside one flow (Prefect's temporary server, as `ts train` without a server), each round submits
`--tasks` task runs of an empty task one after the other and waits for each, then starts and joins as
many threads running the same empty function, the order turned each round. For each side it prints
the wall time and the CPU time of the whole process tree (this process and the server's) per call,
the CPU measured until the tree is idle again (the server records a task run's states a moment
later), less the tree's idle CPU over as long, and the ratio task run / thread.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import threading
import time

import psutil
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

import thinking_seeds.flows  # noqa: F401  (first: Prefect's defaults as `ts train` sets them, analytics off)

SETTLE_S = 3.0  # after the last call: the server's recording of the states lands in the window


def nothing(k: int) -> bool:
    return True


empty_task = task(name="empty", cache_policy=NO_CACHE, persist_result=False)(nothing)


def tree_cpu() -> float:
    """CPU seconds (user + system) of this process and every process under it."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def idle_cpu(seconds: float) -> float:
    c0 = tree_cpu()
    time.sleep(seconds)
    return tree_cpu() - c0


def measure(call, n: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per call: n calls, then SETTLE_S of settling, less the idle CPU of as long."""
    c0, t0 = tree_cpu(), time.perf_counter()
    for k in range(n):
        call(k)
    wall = time.perf_counter() - t0
    time.sleep(SETTLE_S)
    cpu = tree_cpu() - c0 - idle_cpu(wall + SETTLE_S)
    return 1000 * wall / n, 1000 * cpu / n


def in_thread(k: int) -> None:
    t = threading.Thread(target=nothing, args=(k,))
    t.start()
    t.join()


@flow(name="bench-task-cost")
def bench(n: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    for k in range(3):  # the task engine's first calls (imports, the server's first writes)
        empty_task.submit(k).wait()
    time.sleep(SETTLE_S)
    sides = {"task run": lambda k: empty_task.submit(k).wait(), "thread": in_thread}
    out: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
    for r in range(rounds):
        for name in list(sides)[r % 2 :] + list(sides)[: r % 2]:
            out[name].append(measure(sides[name], n))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=40, help="calls per side and round")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    out = bench(a.tasks, a.rounds)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {a.tasks} calls x {a.rounds} rounds per side"
    )
    med = {}
    for name, rows in out.items():
        wall, cpu = statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows)
        med[name] = (wall, cpu)
        per = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in rows)
        print(f"{name:9s} per call: wall {wall:7.2f} ms, CPU {cpu:7.2f} ms (per round, wall/CPU ms: {per})")
    (tw, tc), (hw, hc) = med["task run"], med["thread"]
    # the thread's CPU is ~0 (within the idle correction's noise): the difference, not a ratio of CPU
    print(f"task run / thread: wall {tw / hw:.0f}x; a task run costs {tc - hc:.1f} ms of CPU more per call")


if __name__ == "__main__":
    main()
