"""Seeds sampled while the policy trains (pipeline.overlap, issue #12 item 2) and drafts stopped at
their cut (prefix.ratio_of=budget, item 3): per-iteration wall and CPU time, thinking_seeds on the
tiny preset.

    OMP_NUM_THREADS=1 .venv/bin/python bench/overlap.py [--rounds 3] [--iterations 5]
        [--launchers in_process,accelerate] [--budget] [--prefect]

Every round runs, for each update launcher, the run with overlap off and on (and with --budget,
ratio_of=budget with overlap off), interleaved, the order turned every round, in this process
(the plain loop; --prefect: the training flow). An iteration's wall time runs from the end of
iteration k-1's last manifest to the end of k's; its CPU time is user + system of this process and
its live children (the persistent trainer, the verifier's workers) over the same span
(bench/peer_trl.py's measure). Iterations 1..n-1 are measured: iteration 0 launches the persistent
trainer and has no seeds to sample ahead. Per variant: medians over every measured iteration; per
launcher: on/off ratios, the median of the per-round ratios with their range.

Also per variant: the seeds stage's sampling (generation, weight swaps, draft scoring: what overlap
moves beside the update, the most it can hide), the update stage's seconds, the draft tokens
sampled per iteration (sum of draft_len), and `others`: the cores other jobs on the machine kept
busy meanwhile (the machine's busy CPU seconds minus this run's, per wall second). Overlap needs a
core free for the drafts: here 2 cores in all; the in-process update holds one and shares the GIL
with the drafting thread; with accelerate the trainer is its own process and the pipeline's
process only waits on its socket.
"""

from __future__ import annotations

import argparse
import contextlib
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

from peer_trl import load_avg, stamp_iteration_ends  # noqa: E402

QUIET = 0.25  # cores other jobs may take for an iteration to count as run on a quiet machine
SAMPLING = ("generation", "weight_swap", "verification", "model_load")  # the seeds stage's work


def overrides(launcher: str, overlap: bool, ratio_of: str, iterations: int) -> list[str]:
    return [
        "algorithm=thinking_seeds",
        f"iterations={iterations}",
        f"update.launcher={launcher}",
        f"pipeline.overlap={str(overlap).lower()}",
        f"prefix.ratio_of={ratio_of}",
        f"eval.every={iterations + 1}",  # evaluation off but the run's final 1-sample check
        "eval.prompts=1",
        "eval.samples=1",
        "eval.seeded=false",
    ]


def one_run(variant: tuple[str, bool, str], iterations: int, prefect: bool, base: Path, tag: str) -> dict:
    from thinking_seeds.config import load_config
    from thinking_seeds.store.parquet_io import read_table
    from thinking_seeds.store.run_dir import RunDir

    launcher, overlap, ratio_of = variant
    run_id = f"overlap-{launcher}-{int(overlap)}-{ratio_of}-{tag}"
    ov = overrides(launcher, overlap, ratio_of, iterations)
    os.environ["TS_RUNS_DIR"] = str(base)
    stamps: dict[int, tuple] = {}
    busy: dict[int, float] = {}
    with stamp_iteration_ends(stamps), stamp_machine_busy(busy):
        if prefect:
            from thinking_seeds.flows.train import train_flow

            train_flow(preset="tiny", run_id=run_id, overrides=ov)
        else:
            from thinking_seeds.pipeline.loop import train

            train(RunDir.for_run(run_id, base), load_config("tiny", ov))
    run = RunDir.for_run(run_id, base)
    ks = range(1, iterations)
    out: dict[str, list[float]] = {"wall": [], "cpu": [], "seeds_sampling": [], "seeds_stage": [], "update": []}
    out.update({"draft_tokens": [], "ahead": [], "others": []})
    for k in ks:
        wall, cpu = stamps[k][0] - stamps[k - 1][0], stamps[k][1] - stamps[k - 1][1]
        out["wall"].append(wall)
        out["cpu"].append(cpu)
        out["others"].append((busy[k] - busy[k - 1] - cpu) / wall)  # cores other jobs kept busy meanwhile
        seeds, update = run.read_manifest(k, "seeds"), run.read_manifest(k, "update")
        out["seeds_sampling"].append(sum(seeds.seconds.get(p, 0.0) for p in SAMPLING))
        out["seeds_stage"].append(sum(seeds.seconds.values()))
        out["update"].append(sum(update.seconds.values()))
        out["draft_tokens"].append(float(sum(read_table(run.prefixes(k)).column("draft_len").to_pylist())))
        out["ahead"].append(seeds.metrics.get("perf/seeds_ahead", 0.0))
    shutil.rmtree(run.root, ignore_errors=True)
    return out


@contextlib.contextmanager
def stamp_machine_busy(busy: dict[int, float]):
    """The machine's busy CPU seconds (all processes) when each iteration's last manifest is written:
    minus this run's own CPU, what other jobs took; overlap needs a core they leave free."""
    import psutil

    from thinking_seeds.store.run_dir import RunDir

    original = RunDir.write_manifest

    def write_manifest(self, m):
        original(self, m)
        if m.stage == "evaluate":
            t = psutil.cpu_times()
            busy[m.iteration] = sum(t) - t.idle - getattr(t, "iowait", 0.0)

    RunDir.write_manifest = write_manifest
    try:
        yield
    finally:
        RunDir.write_manifest = original


def name(v: tuple[str, bool, str]) -> str:
    return f"{v[0]}/overlap={'on' if v[1] else 'off'}" + ("" if v[2] == "draft" else f"/ratio_of={v[2]}")


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--launchers", default="in_process,accelerate")
    ap.add_argument("--budget", action="store_true", help="also ratio_of=budget (overlap off) per launcher")
    ap.add_argument("--prefect", action="store_true", help="the Prefect training flow instead of the plain loop")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    variants = [(lau, ov, "draft") for lau in a.launchers.split(",") for ov in (False, True)]
    if a.budget:
        variants += [(lau, False, "budget") for lau in a.launchers.split(",")]
    base = Path(tempfile.mkdtemp(prefix="ts-bench-overlap-"))
    rows: dict[tuple, list[dict]] = {v: [] for v in variants}
    print(f"load average at the start {load_avg()}", flush=True)
    t0 = time.perf_counter()
    try:
        for r in range(a.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for v in order:
                res = one_run(v, a.iterations, a.prefect, base, f"r{r}")
                rows[v].append(res)
                print(
                    f"round {r} {name(v):40} iteration wall {med(res['wall']):.2f} s, CPU {med(res['cpu']):.2f} s, "
                    f"other jobs {med(res['others']):.2f} cores, load {load_avg()}",
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, torch "
        f"{torch.__version__}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
        f"{'Prefect flow (no server)' if a.prefect else 'plain loop'}; load average at the end {load_avg()}; "
        f"{time.perf_counter() - t0:.0f} s in all"
    )
    n = a.rounds * (a.iterations - 1)
    print(f"per iteration, median of {n} iterations (1..{a.iterations - 1} of {a.rounds} rounds), seconds / tokens")
    print(
        f"{'variant':42} {'wall':>6} {'CPU':>6} {'seeds sampling':>14} {'seeds stage':>11} {'update':>7} "
        f"{'draft tokens':>12} {'ahead':>5} {'others':>6}"
    )
    pooled = {v: {key: [x for res in rs for x in res[key]] for key in rs[0]} for v, rs in rows.items()}
    for v, p in pooled.items():
        print(
            f"{name(v):42} {med(p['wall']):6.2f} {med(p['cpu']):6.2f} {med(p['seeds_sampling']):14.2f} "
            f"{med(p['seeds_stage']):11.2f} {med(p['update']):7.2f} {med(p['draft_tokens']):12.0f} "
            f"{sum(p['ahead']) / len(p['ahead']):5.2f} {med(p['others']):6.2f}"
        )
    quiet = {v: [w for w, o in zip(p["wall"], p["others"], strict=True) if o < QUIET] for v, p in pooled.items()}
    print(
        f"iterations while other jobs kept < {QUIET} core busy (a core free for the drafts): "
        + ", ".join(f"{name(v)} {len(w)}" + (f" median wall {med(w):.2f} s" if w else "") for v, w in quiet.items())
    )
    for lau in a.launchers.split(","):
        off, on = (lau, False, "draft"), (lau, True, "draft")
        if quiet[off] and quiet[on]:
            print(f"{lau}: overlap on/off wall ratio on a quiet machine {med(quiet[on]) / med(quiet[off]):.3f}")
        for label, key in (("wall", "wall"), ("CPU", "cpu")):
            per_round = [med(x[key]) / med(y[key]) for x, y in zip(rows[on], rows[off], strict=True)]
            print(
                f"{lau}: overlap on/off {label} {med(pooled[on][key]) - med(pooled[off][key]):+.2f} s per iteration, "
                f"ratio {med(per_round):.3f} (per round: {', '.join(f'{x:.3f}' for x in per_round)})"
            )
        if a.budget:
            b = (lau, False, "budget")
            parts = (("wall", "wall"), ("seeds sampling", "seeds_sampling"), ("draft tokens", "draft_tokens"))
            for label, key in parts:
                per_round = [med(x[key]) / med(y[key]) for x, y in zip(rows[b], rows[off], strict=True)]
                print(
                    f"{lau}: ratio_of budget/draft {label} ratio {med(per_round):.3f} "
                    f"(per round: {', '.join(f'{x:.3f}' for x in per_round)})"
                )


if __name__ == "__main__":
    main()
