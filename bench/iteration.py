"""Wall time of one training iteration on a preset (default tiny), split into the work and the overhead.

    python bench/iteration.py [--iterations 5] [--rounds 3] [--methods grpo,thinking_seeds]
        [--launchers in_process,accelerate,accelerate_per_update] [--no-prefect] [--preset tiny]
        [--set KEY=VALUE ...]

    .venv-vllm/bin/python bench/iteration.py --preset smollm2 --launchers accelerate   # vLLM, SmolLM2
    python bench/iteration.py --before COMMIT --rounds 6 --methods grpo,thinking_seeds --launchers accelerate

With `--before COMMIT`, each round runs once with the code at COMMIT and once with this checkout (the
order turned each round; bench/_code_at.py), each in a process of its own, and the ratio of every method
to grpo is printed per round for both codes: a change measured before and after in the same run.

A method may carry config overrides after `+` (a variant measured beside the others, interleaved):
`--methods grpo,thinking_seeds,thinking_seeds+pipeline.overlap=true`; `--set` applies to every run.

For each round and method it runs `train_flow` (Prefect, no server) once per update launcher --
in process, the persistent `accelerate launch` trainer (`accelerate`), a fresh `accelerate launch`
per update (`accelerate_per_update`) -- interleaved, the methods' and the launchers' order turned every round, then
reads the stage timings each run wrote:

  generation      sampling time of the seeds and continuation stages (model forward passes); seeds
                  sampled ahead beside the previous update (pipeline.overlap, on by default on the
                  CPU) are off the critical path and not counted
  fwd/bwd         the update's forward/backward/optimizer time (thinking_seeds.train.trainer, perf/fwd_bwd_s)
  π_old           the update's forward pass that recomputes the old log-probs (update.recompute_old_logprobs,
                  perf/old_logprob_s): model work like verl's compute_log_prob, so not counted as overhead
  verification    math-verify time of the verify stage (and of the seeds' draft rewards)
  everything else iteration wall time minus the four above: Prefect task orchestration, process
                  launches, model loading/saving, Parquet I/O, log-prob bookkeeping

Iteration wall time is measured between the manifests of consecutive iterations (the end of
iteration k-1's last stage to the end of iteration k's), so the one-off costs of a run — Prefect's
temporary server, data generation, θ_0 — are reported separately as `startup`, and iteration 0
(which launches the persistent trainer) as `1st iter`. Figures are medians over every measured
iteration of every round; the ratio to in-process is also shown per round. Evaluation is switched
off except a 1-sample check at the end (it is not part of an iteration's work).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def stage_seconds(run, k: int) -> dict[str, float]:
    """The work of iteration k on its critical path. Seeds sampled ahead (pipeline.overlap: beside
    update k-1, `perf/seeds_ahead`) are left out: their time was spent while the update ran, so it
    is not part of this iteration's wall time."""
    out = {"generation": 0.0, "fwd_bwd": 0.0, "old_logprobs": 0.0, "verification": 0.0}
    for stage in ("snapshot", "seeds", "continuation", "verify", "update", "evaluate"):
        m = run.read_manifest(k, stage)
        if m is None or (stage == "seeds" and m.metrics.get("perf/seeds_ahead")):
            continue
        out["generation"] += m.seconds.get("generation", 0.0) if stage in ("seeds", "continuation") else 0.0
        out["verification"] += m.seconds.get("verification", 0.0)
        out["fwd_bwd"] += m.metrics.get("perf/fwd_bwd_s", 0.0) if stage == "update" else 0.0
        out["old_logprobs"] += m.metrics.get("perf/old_logprob_s", 0.0) if stage == "update" else 0.0
    return out


STAGES = ("snapshot", "seeds", "continuation", "verify", "update", "evaluate")


def stage_walls(run, k: int) -> dict[str, float]:
    """Where iteration k's wall time went, stage by stage (--breakdown): each stage's wall from the
    end of the manifest before it to the end of its own (stages run in this order; seeds drafted ahead
    end before the previous update does, so theirs reads 0), and each `seconds` part the stage timed
    itself (e.g. update/load_weights), so the untimed rest of a stage is its wall minus its parts."""
    out, prev = {}, run.manifest_path(k - 1, "evaluate").stat().st_mtime
    for stage in STAGES:
        path = run.manifest_path(k, stage)
        if not path.exists():
            continue
        end = path.stat().st_mtime
        out[f"{stage} wall"] = max(0.0, end - prev)
        prev = max(prev, end)
        m = run.read_manifest(k, stage)
        for part, sec in m.seconds.items():
            out[f"{stage}/{part}"] = sec
        for name, v in m.metrics.items():  # the trainer's own split of the update (perf/load_s, save_s, ...)
            if name.endswith("_s") and name.startswith("perf/"):
                out[f"{stage} {name}"] = v
    return out


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def median_interval(xs: list[float], resamples: int = 2000) -> str:
    """The 95% bootstrap interval of the median of `xs` (the rounds resampled with replacement): how far
    a run's median ratio can be trusted on a noisy machine ("n/a" under 3 rounds)."""
    if len(xs) < 3:
        return "95% interval n/a"
    import random

    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(resamples))
    return f"95% interval {meds[int(0.025 * resamples)]:.3f}-{meds[int(0.975 * resamples) - 1]:.3f}"


def iteration_walls(run, n: int) -> list[float]:
    """Wall seconds of iterations 0..n-1 (iteration 0 from the end of θ_0's evaluation)."""
    ends = [run.manifest_path(k, "evaluate").stat().st_mtime for k in range(-1, n)]
    return [b - a for a, b in itertools.pairwise(ends)]


def bench_overrides(method: str, launcher: str, iterations: int, extra: tuple[str, ...] = ()) -> list[str]:
    """The tiny preset as the benches run it: `method`, `launcher`, evaluation off but a 1-sample check;
    then `extra` (--set and a method's own variant, e.g. pipeline.overlap=false)."""
    return [
        f"algorithm={method}",
        f"iterations={iterations}",
        f"update.launcher={launcher}",
        f"eval.every={iterations + 1}",
        "eval.prompts=1",
        "eval.samples=1",
        "eval.seeded=false",
        *extra,
    ]


def bench(
    method: str,
    launcher: str,
    iterations: int,
    prefect: bool,
    base: Path,
    tag: str,
    preset: str = "tiny",
    extra: tuple[str, ...] = (),
) -> dict:
    """One run; per-iteration lists for iterations 1..n-1, and the one-off costs."""
    from thinking_seeds.config import load_config
    from thinking_seeds.store.run_dir import RunDir

    algorithm, *variant = method.split("+")  # thinking_seeds+pipeline.overlap=true: a variant
    overrides = bench_overrides(algorithm, launcher, iterations, (*extra, *variant))
    run_id = f"bench-{method}-{launcher}-{tag}"
    os.environ["TS_RUNS_DIR"] = str(base)
    t0 = time.perf_counter()
    t_wall0 = time.time()
    if prefect:
        from thinking_seeds.flows.train import train_flow

        train_flow(preset=preset, run_id=run_id, overrides=overrides)
    else:
        from thinking_seeds.pipeline.loop import train

        train(RunDir.for_run(run_id, base), load_config(preset, overrides))
    total = time.perf_counter() - t0
    run = RunDir.for_run(run_id, base)
    walls = iteration_walls(run, iterations)
    parts = [stage_seconds(run, k) for k in range(1, iterations)]
    row = {key: [p[key] for p in parts] for key in parts[0]}
    row["iteration_wall"] = walls[1:]
    row["everything_else"] = [w - sum(p.values()) for w, p in zip(walls[1:], parts, strict=True)]
    row["breakdown"] = [stage_walls(run, k) for k in range(1, iterations)]
    row["first_iteration"] = walls[0]  # with the persistent trainer: its launch
    # Everything before iteration 0 starts (Prefect start-up, data, θ_0 and its evaluation).
    row["startup"] = run.manifest_path(-1, "evaluate").stat().st_mtime - t_wall0
    row["total"] = total
    shutil.rmtree(run.root, ignore_errors=True)
    return row


def pooled(rows: list[dict]) -> dict:
    """Every round's per-iteration values in one list per key (one-off costs: one per round)."""
    out: dict[str, list[float]] = {}
    for r in rows:
        for key, v in r.items():
            if key == "breakdown":
                out.setdefault(key, []).extend(v)
                continue
            out.setdefault(key, []).extend(v if isinstance(v, list) else [v])
    return out


def before_and_after(a: argparse.Namespace) -> None:
    """--before COMMIT: one round at a time in a child process, with the code at COMMIT and with this
    checkout in turn (the order turned each round); each method's ratio to grpo per round, both codes."""
    from _code_at import code_at, code_env

    # the child's arguments: this run's, one round at a time, no --before
    child = ["--iterations", str(a.iterations), "--rounds", "1", "--methods", a.methods, "--launchers", a.launchers]
    child += ["--preset", a.preset, *(["--no-prefect"] if a.no_prefect else [])]
    child += [x for o in a.overrides for x in ("--set", o)]
    ratios: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ts-bench-ab-") as tmp:  # the old code's copy too: removed after
        tree = code_at(a.before, Path(tmp))
        for r in range(a.rounds):
            for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                script = tree / "bench" / "iteration.py" if side == "before" else Path(__file__).resolve()
                out = Path(tmp) / f"{side}-{r}.json"
                env = code_env(tree) if side == "before" else dict(os.environ)
                # the round's number, by which the child turns its methods' order (a COMMIT older than
                # the option runs grpo first in every round)
                turns = side == "after" or "--first-round" in script.read_text()
                args = [*child, *(["--first-round", str(r)] if turns else [])]
                done = subprocess.run(
                    [sys.executable, str(script), *args, "--json", str(out)], env=env, capture_output=True, text=True
                )
                if done.returncode:  # the child's own lines are quiet; its error is not
                    sys.exit(f"round {r} {side} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
                res = json.loads(out.read_text())
                for key, row in res.items():
                    m, launcher = key.split("/")
                    if m != "grpo" and f"grpo/{launcher}" in res:
                        base = median(res[f"grpo/{launcher}"]["iteration_wall"])
                        ratios.setdefault((side, key), []).append(median(row["iteration_wall"]) / base)
                        print(f"round {r} {side:6s} {key}: {ratios[(side, key)][-1]:.3f}x grpo", flush=True)
    print(
        f"\nbefore = the code at {a.before}, after = this checkout; {a.rounds} rounds, interleaved, "
        f"{'plain loop' if a.no_prefect else 'Prefect flow'}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    for (side, key), xs in sorted(ratios.items(), key=lambda kv: (kv[0][1], kv[0][0] != "before")):
        print(
            f"{key} / grpo, {side:6s}: median {median(xs):.3f}x, {median_interval(xs)} "
            f"(per round: {', '.join(f'{x:.3f}' for x in xs)})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds: every launcher once per round")
    ap.add_argument(
        "--first-round", type=int, default=0, help="the first round's number (methods and launchers turn by it)"
    )
    ap.add_argument("--methods", default="grpo,thinking_seeds")
    ap.add_argument("--launchers", default="in_process,accelerate,accelerate_per_update")
    ap.add_argument("--no-prefect", action="store_true", help="plain loop instead of the Prefect flow")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--before", metavar="COMMIT", help="also run each round with the code at COMMIT, interleaved")
    ap.add_argument(
        "--breakdown", action="store_true", help="also print each stage's wall and timed parts (medians, s)"
    )
    ap.add_argument(
        "--preset", default="tiny", help="tiny (HF engine), or smollm2 (vLLM: run with .venv-vllm; `make smollm2`)"
    )
    ap.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="config override, every run"
    )
    a = ap.parse_args()
    if a.before:
        return before_and_after(a)
    methods, launchers = a.methods.split(","), a.launchers.split(",")
    base = Path(tempfile.mkdtemp(prefix="ts-bench-"))
    runs: dict[tuple[str, str], list[dict]] = {}
    try:
        for r in range(a.first_round, a.first_round + a.rounds):
            # Interleaved, and the order of the methods and of the launchers turned each round: a drift of
            # the machine's load (or what the run before leaves behind) spreads over every side instead of
            # landing on one (before 2026-12-07 the methods ran in one order: grpo always first).
            for method in methods[r % len(methods) :] + methods[: r % len(methods)]:
                order = launchers[r % len(launchers) :] + launchers[: r % len(launchers)]
                for launcher in order:
                    row = bench(
                        method, launcher, a.iterations, not a.no_prefect, base, f"r{r}", a.preset, tuple(a.overrides)
                    )
                    runs.setdefault((method, launcher), []).append(row)
                    print(
                        f"round {r} {method} {launcher}: iteration median {median(row['iteration_wall']):.2f} s",
                        flush=True,
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results = {key: pooled(rows) for key, rows in runs.items()}

    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
        f"{'plain loop' if a.no_prefect else 'Prefect flow (no server)'}, preset {a.preset}"
        + (f", --set {' '.join(a.overrides)}" if a.overrides else "")
    )
    n_it = a.rounds * (a.iterations - 1)
    print(f"per-iteration wall time, median of {n_it} iterations (1..{a.iterations - 1} of {a.rounds} rounds), s")
    w = max(16, *(len(m) for m in methods))
    hdr = (
        f"{'method':{w}} {'launcher':22} {'iteration':>9} {'generation':>10} {'fwd/bwd':>8} {'π_old':>6} "
        f"{'verify':>7} {'else':>7} {'else %':>7} {'1st iter':>8}"
    )
    print(hdr)
    for (m, launcher), r in results.items():
        wall, other = median(r["iteration_wall"]), median(r["everything_else"])
        print(
            f"{m:{w}} {launcher:22} {wall:9.2f} {median(r['generation']):10.2f} {median(r['fwd_bwd']):8.2f} "
            f"{median(r['old_logprobs']):6.2f} "
            f"{median(r['verification']):7.2f} {other:7.2f} {100 * other / wall:6.1f}% "
            f"{median(r['first_iteration']):8.2f}"
        )
    if a.breakdown:
        for (m, launcher), r in results.items():
            keys = sorted({key for b in r["breakdown"] for key in b})
            print(f"\nbreakdown {m} {launcher} (median over iterations, s):")
            for key in keys:
                print(f"  {key:40} {median([b.get(key, 0.0) for b in r['breakdown']]):8.3f}")
    for m in methods:
        if (m, "in_process") not in results:
            continue
        ip = median(results[(m, "in_process")]["iteration_wall"])
        for launcher in launchers:
            if launcher != "in_process" and (m, launcher) in results:
                ac = median(results[(m, launcher)]["iteration_wall"])
                per_round = [
                    median(x["iteration_wall"]) / median(y["iteration_wall"])
                    for x, y in zip(runs[(m, launcher)], runs[(m, "in_process")], strict=True)
                ]
                print(
                    f"{m}: {launcher} {ac - ip:+.2f} s per iteration, ratio {ac / ip:.3f}x of in-process "
                    f"(per round: {', '.join(f'{x:.3f}' for x in per_round)})"
                )
    # Thinking Seeds against our GRPO, launcher by launcher (issue #12 goal: <= 1.1x), from the same rounds.
    if "grpo" in methods:
        for m in methods:
            for launcher in launchers:
                if m == "grpo" or (m, launcher) not in results or ("grpo", launcher) not in results:
                    continue
                per_round = [
                    median(x["iteration_wall"]) / median(y["iteration_wall"])
                    for x, y in zip(runs[(m, launcher)], runs[("grpo", launcher)], strict=True)
                ]
                print(
                    f"{m}/grpo with {launcher}: ratio {median(per_round):.3f}x, median of per-round ratios, "
                    f"{median_interval(per_round)} (per round: {', '.join(f'{x:.3f}' for x in per_round)})"
                )
    startups = ", ".join(f"{m}/{launcher} {median(r['startup']):.1f}" for (m, launcher), r in results.items())
    print("one-off startup per run, median (s): " + startups)
    if a.json:
        a.json.write_text(json.dumps({f"{m}/{launcher}": r for (m, launcher), r in results.items()}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
