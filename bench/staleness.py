"""Bounded-staleness rollouts (pipeline.max_staleness, issue #28 item 4): iteration wall time with
the groups of iteration k+1 sampled by θ_k while update k runs (max_staleness=1, one-step-off) against
the synchronous pipeline (max_staleness=0), Thinking Seeds and GRPO, on the tiny and SmolLM2 presets.

    OMP_NUM_THREADS=1 .venv/bin/python bench/staleness.py [--presets tiny,smollm2] [--rounds 3]
        [--iterations 4] [--methods thinking_seeds,grpo] [--launcher accelerate]

Every round runs, per preset and method, the run with max_staleness 0 and 1, interleaved, the order
turned every round, in this process (the plain loop). An iteration's wall time runs from the end of
iteration k-1's last manifest to the end of k's (bench/peer_trl.py's stamps); iterations 1..n-1 are
measured (iteration 0 launches the trainer and has nothing sampled ahead). Per variant: the median
over every measured iteration; per preset and method: the 1/0 ratio, the median of the per-round
ratios with their range. Also: the continuation stage's seconds (what moves beside the update), the
update's, the share of iterations whose groups were sampled ahead, and the cores other jobs on the
machine kept busy meanwhile (bench/overlap.py's measure). Sampling ahead needs a core (or GPU) free
beside the trainer: with launcher=accelerate the trainer is its own process.

verl's published one-step-off figures, end to end against its synchronous pipeline: +23% throughput
(FSDP2) and +40% (Megatron), on GPUs; a ratio r here is 1/r - 1 more iterations per second.
"""

from __future__ import annotations

import argparse
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

from overlap import stamp_machine_busy  # noqa: E402
from peer_trl import load_avg, stamp_iteration_ends  # noqa: E402

# Per preset: the settings that keep a run to minutes on 2 CPU cores (fewer prompts for SmolLM2).
PRESET_SETTINGS = {
    "tiny": [],
    "smollm2": ["rollout.engine=hf", "rollout.prompts_per_iteration=4"],  # HF engine: vLLM has its own venv
}


def overrides(preset: str, method: str, staleness: int, iterations: int, launcher: str) -> list[str]:
    return [
        f"algorithm={method}",
        f"iterations={iterations}",
        f"update.launcher={launcher}",
        f"pipeline.max_staleness={staleness}",
        f"eval.every={iterations + 1}",  # evaluation off but the run's final 1-sample check
        "eval.prompts=1",
        "eval.samples=1",
        "eval.seeded=false",
        *PRESET_SETTINGS[preset],
    ]


def one_run(preset: str, method: str, staleness: int, a: argparse.Namespace, base: Path, tag: str) -> dict:
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    run_id = f"stale-{preset}-{method}-{staleness}-{tag}"
    cfg = load_config(preset, overrides(preset, method, staleness, a.iterations, a.launcher))
    stamps: dict[int, tuple] = {}
    busy: dict[int, float] = {}
    with stamp_iteration_ends(stamps), stamp_machine_busy(busy):
        train(RunDir.for_run(run_id, base), cfg)
    run = RunDir.for_run(run_id, base)
    out: dict[str, list[float]] = {"wall": [], "continuation": [], "update": [], "ahead": [], "others": []}
    for k in range(1, a.iterations):
        wall, cpu = stamps[k][0] - stamps[k - 1][0], stamps[k][1] - stamps[k - 1][1]
        out["wall"].append(wall)
        out["others"].append((busy[k] - busy[k - 1] - cpu) / wall)
        cont, update = run.read_manifest(k, "continuation"), run.read_manifest(k, "update")
        out["continuation"].append(sum(cont.seconds.values()))
        out["update"].append(sum(update.seconds.values()))
        out["ahead"].append(cont.metrics.get("perf/sampled_ahead", 0.0))
    shutil.rmtree(run.root, ignore_errors=True)
    return out


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="tiny,smollm2")
    ap.add_argument("--methods", default="thinking_seeds,grpo")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--launcher", default="accelerate", help="update.launcher of every run")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    pairs = [(p, m) for p in a.presets.split(",") for m in a.methods.split(",")]
    rows: dict[tuple, list[dict]] = {(p, m, s): [] for p, m in pairs for s in (0, 1)}
    base = Path(tempfile.mkdtemp(prefix="ts-bench-staleness-"))
    print(f"load average at the start {load_avg()}", flush=True)
    t0 = time.perf_counter()
    try:
        for r in range(a.rounds):
            for p, m in pairs:
                for s in (0, 1) if r % 2 == 0 else (1, 0):  # interleaved, the order turned every round
                    res = one_run(p, m, s, a, base, f"r{r}")
                    rows[(p, m, s)].append(res)
                    print(
                        f"round {r} {p}/{m}/max_staleness={s}: iteration wall {med(res['wall']):.2f} s, "
                        f"continuation {med(res['continuation']):.2f} s, update {med(res['update']):.2f} s, "
                        f"other jobs {med(res['others']):.2f} cores, load {load_avg()}",
                        flush=True,
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, torch "
        f"{torch.__version__}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, plain loop, "
        f"update.launcher={a.launcher}; load average at the end {load_avg()}; {time.perf_counter() - t0:.0f} s in all"
    )
    n = a.rounds * (a.iterations - 1)
    print(f"per iteration, median of {n} iterations (1..{a.iterations - 1} of {a.rounds} rounds), seconds")
    print(f"{'variant':44} {'wall':>6} {'continuation':>12} {'update':>7} {'ahead':>5} {'others':>6}")
    pooled = {v: {key: [x for res in rs for x in res[key]] for key in rs[0]} for v, rs in rows.items()}
    for (p, m, s), q in pooled.items():
        print(
            f"{p + '/' + m + '/max_staleness=' + str(s):44} {med(q['wall']):6.2f} {med(q['continuation']):12.2f} "
            f"{med(q['update']):7.2f} {sum(q['ahead']) / len(q['ahead']):5.2f} {med(q['others']):6.2f}"
        )
    for p, m in pairs:
        sync, stale = rows[(p, m, 0)], rows[(p, m, 1)]
        per_round = [med(x["wall"]) / med(y["wall"]) for x, y in zip(stale, sync, strict=True)]
        ratio = med(per_round)
        print(
            f"{p}/{m}: max_staleness 1/0 iteration wall ratio {ratio:.3f} "
            f"(per round: {', '.join(f'{x:.3f}' for x in per_round)}), throughput {100 * (1 / ratio - 1):+.0f}% "
            "(verl one-step-off: +23% FSDP2, +40% Megatron)"
        )


if __name__ == "__main__":
    main()
