"""What each process of a tiny training run holds: peak RSS per process and of the whole tree.

    OMP_NUM_THREADS=1 .venv/bin/python bench/process_tree.py [--rounds 2] [--iterations 3] [--no-prefect]
                                                             [--set KEY=VALUE ...]

Runs `ts train --preset tiny --set algorithm=grpo --set iterations=N` (a fresh run per round, the
default launcher: the persistent trainer) and samples the process tree under it every 0.1 s with
psutil: each process's peak RSS, by role (the pipeline, accelerate's launcher, the persistent trainer,
the verifier's worker, the child guards, Prefect's server, anything else), and the peak of the tree's
sum (the figure to hold against one TRL process). RSS counts shared pages (torch's libraries) once per
process, as `ps` does: what each process costs the machine is closer to its USS, printed beside it.

`TreePeak` is also what bench/peer_trl.py measures both sides' process trees with.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

TS = str(Path(sys.executable).with_name("ts"))

ROLES = (  # the first match names the process (`ts train --no-prefect` is the pipeline, not Prefect)
    ("trl driver", "_trl_driver.py"),
    ("pipeline", "bench/peer_trl.py"),  # our sides of peer_trl run in its own process
    ("pipeline", "bin/ts train"),
    ("resource tracker", "multiprocessing.resource_tracker"),
    ("launcher", "accelerate.commands.launch"),
    ("trainer", "thinking_seeds.train.trainer_server"),
    ("trainer", "thinking_seeds.train.trainer"),
    ("verifier worker", "multiprocessing.spawn"),
    ("verifier worker", "multiprocessing-fork"),
    ("child guard", "python3 -S -c"),
    ("child guard", "python -S -c"),
    ("prefect server", "prefect"),
    ("prefect server", "uvicorn"),
)


def role_of(cmdline: list[str]) -> str:
    line = " ".join(cmdline)
    for role, needle in ROLES:
        if needle in line:
            return role
    return "other: " + " ".join(cmdline)[:60]


class TreePeak:
    """Samples `pid` and its descendants every `every_s` in a thread: the peak of the sum of their RSS,
    and each process's own peak RSS and USS (MiB) with its role, until stop()."""

    def __init__(self, pid: int, every_s: float = 0.1, uss: bool = True) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.every_s, self.uss = every_s, uss
        self.peak_sum = 0.0
        self.procs: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0.0
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                try:
                    mem = p.memory_full_info() if self.uss else p.memory_info()
                    rec = self.procs.get(p.pid)
                    if rec is None:
                        rec = self.procs[p.pid] = {"role": role_of(p.cmdline()), "rss": 0.0, "uss": 0.0}
                except psutil.Error:
                    continue
                rss = mem.rss / 2**20
                total += rss
                rec["rss"] = max(rec["rss"], rss)
                rec["uss"] = max(rec["uss"], getattr(mem, "uss", 0) / 2**20)
            self.peak_sum = max(self.peak_sum, total)
            self._stop.wait(self.every_s)

    def by_role(self) -> dict[str, tuple[int, float, float]]:
        """role -> (processes, sum of their peak RSS, sum of their peak USS)."""
        out: dict[str, tuple[int, float, float]] = {}
        for rec in self.procs.values():
            n, rss, uss = out.get(rec["role"], (0, 0.0, 0.0))
            out[rec["role"]] = (n + 1, rss + rec["rss"], uss + rec["uss"])
        return out


def one_run(base: Path, iterations: int, prefect: bool, extra: list[str]) -> tuple[float, TreePeak, float]:
    run_id = f"tree-{time.time_ns()}"
    cmd = [TS, "train", "--preset", "tiny", "--run-id", run_id, "--runs-dir", str(base)]
    cmd += ["--set", "algorithm=grpo", "--set", f"iterations={iterations}"]
    for s in extra:
        cmd += ["--set", s]
    if not prefect:
        cmd.append("--no-prefect")
    env = dict(os.environ, OMP_NUM_THREADS="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with TreePeak(proc.pid) as peak:
        _, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"ts train failed ({proc.returncode}): {err[-2000:]}")
    shutil.rmtree(base / run_id, ignore_errors=True)
    return wall, peak, os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--no-prefect", action="store_true", help="the plain loop (default: the Prefect flow)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="a config override, repeatable")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ts-tree-"))
    peaks, walls = [], []
    for r in range(a.rounds):
        wall, peak, load = one_run(base, a.iterations, not a.no_prefect, a.overrides)
        peaks.append(peak.peak_sum)
        walls.append(wall)
        print(f"round {r + 1}: {wall:.1f} s, tree peak RSS {peak.peak_sum:.0f} MiB, load {load:.1f}", flush=True)
        for role, (n, rss, uss) in sorted(peak.by_role().items(), key=lambda kv: -kv[1][1]):
            print(f"  {role:18s} {n:2d} process{'es' if n > 1 else '  '}  peak RSS {rss:6.0f} MiB  USS {uss:6.0f} MiB")
    print(
        f"tiny grpo, {a.iterations} iterations, {'plain loop' if a.no_prefect else 'Prefect flow'}: tree peak RSS "
        f"median {statistics.median(peaks):.0f} MiB, wall median {statistics.median(walls):.1f} s"
    )
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
