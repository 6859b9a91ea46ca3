"""The equal-compute control: more supervised warm-up instead of RL, for the same wall time.

Any RL method that beats its base model might only be beating a model that was trained less. The
control answers that: starting from the same base model, it continues the supervised warm-up
(`thinking_seeds.train.sft.sft_step`, the very step that built the base model, on fresh worked solutions of
the same task, held-out prompts excluded) for as long as the mean RL run of the comparison trained
(`thinking_seeds.experiments.members.train_seconds`: the runs' `time/*` stage metrics, evaluation left out). It is then
evaluated exactly like the RL runs: its run directory `<compare_id>-sft_control-s<seed>` has a
config (the comparison's shared settings with the on-policy overlay), the same data splits and
θ_0, and the RL runs' own evaluate stage (`thinking_seeds.pipeline.stage_evaluate.evaluate`) writes
`metrics/iteration=K/evaluate.parquet` labelled with the policy step: the same due steps, prompts,
samples, temperature, sampling seeds and seeded (explorable-space) evaluation.

The time axis is matched too (sft_budget.py: `iterations` equal slices of the budget, each saved as a
policy step, pool snapshot and `sft` stage metrics), so the seeded evaluation continues the control's
own earlier checkpoints as an RL run's continues its own, and SQL and the report treat it like any method.

    python -m thinking_seeds.experiments.sft_control --compare-id C --seed 0 --budget-seconds 120 --runs-dir runs \
        [--set k=v ...] [--keep k=v ...]

`--keep` carries the old value of a changed default that the comparison's record of the control holds
(recorded_controls; experiments/recorded_defaults.py), so a control started before the change trains
and hashes as it started. The control's config, its process and the jobs that start it share its run
id and command line, and are kept here so the two sides cannot disagree; the training itself (the
budget's slices, their checkpoints and metrics) is sft_budget.py's.

Caveats (say them in the results): the fresh AdamW has no state from the warm-up (a short ramp
stands in), and wall time depends on the machine's load; the RL runs and the controls are run with
the same parallelism to keep that comparable. Never imports prefect.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError, RunConfig, load_config
from thinking_seeds.experiments.jobs import Job, JobResult, run_jobs
from thinking_seeds.experiments.members import archive_record, discard_restored, train_seconds, write_marker
from thinking_seeds.experiments.recorded_defaults import RunRecords
from thinking_seeds.experiments.run_spec import CONTROL_METHOD, RunSpec, check_same_budget, compute_matched
from thinking_seeds.experiments.sft_budget import eval_steps, read_json, train_for_budget
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.run_dir import RunDir

__all__ = [
    "CONTROL_FILE",
    "control_config",
    "control_run_id",
    "recorded_controls",
    "run_controls",
    "run_sft_control",
]

CONTROL_FILE = "control.json"


def control_run_id(compare_id: str, seed: int) -> str:
    return f"{compare_id}-{CONTROL_METHOD}-s{seed}"


def control_overrides(base_overrides: Sequence[str], seed: int) -> list[str]:
    """The comparison's shared overrides with the on-policy overlay: no seeds, no off-policy data."""
    return [*base_overrides, "algorithm=grpo", f"seed={seed}", "rollout.seeds_per_group=0", "prefix.source=historical"]


def control_config(preset: str, base_overrides: Sequence[str], seed: int, kept: Sequence[str] = ()) -> RunConfig:
    """The control's config; `kept`: the old defaults its comparison's record of it holds (recorded_controls)."""
    return load_config(preset, [*control_overrides(base_overrides, seed), *kept])


def recorded_controls(
    compare_id: str,
    preset: str,
    base_overrides: Sequence[str],
    seeds: Sequence[int],
    runs_dir: Path | None,
    report_dir: Path | None,
) -> dict[int, tuple[str, ...]]:
    """Each control's `kept` overrides: the old values of changed defaults its record holds (its config.yaml
    under `runs_dir` or archived in `report_dir`, or its registered hash), as for RL runs (recorded_defaults.py)."""
    records = RunRecords(runs_dir, report_dir)
    return {k: records.kept(control_run_id(compare_id, k), preset, control_overrides(base_overrides, k)) for k in seeds}


def control_marker(compare_id: str, preset: str, base_overrides: Sequence[str], seed: int) -> dict[str, Any]:
    """compare.json of a control: its method is sft_control, its config the on-policy overlay's."""
    spec = RunSpec(control_run_id(compare_id, seed), compare_id, CONTROL_METHOD, seed, preset, tuple(base_overrides))
    return spec.marker() | {"overrides": control_overrides(base_overrides, seed)}


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True))


def run_sft_control(
    compare_id: str,
    seed: int,
    budget_seconds: float,
    *,
    preset: str = "tiny",
    base_overrides: Sequence[str] = (),
    runs_dir: Path | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    warmup_steps: int = 25,
    corpus_size: int = 50_000,
    max_steps: int | None = None,
    kept: Sequence[str] = (),
    log: Callable[[str], None] = print,
) -> RunDir:
    """Train (or resume) the SFT control of `compare_id` for `seed` and evaluate it; returns its run dir.
    `kept`: the old defaults its comparison's record of it holds (recorded_controls), not in its marker."""
    from thinking_seeds.pipeline.loop import run_prepare
    from thinking_seeds.pipeline.session import Session
    from thinking_seeds.pipeline.stage_evaluate import evaluate

    if not (budget_seconds >= 0 and math.isfinite(budget_seconds)):
        raise ConfigError(f"budget_seconds must be a finite number >= 0, got {budget_seconds}")
    cfg = control_config(preset, base_overrides, seed, kept)
    run = RunDir.for_run(control_run_id(compare_id, seed), Path(runs_dir).resolve() if runs_dir else None)
    write_marker(run.root, control_marker(compare_id, preset, base_overrides, seed))
    run.acquire_lock()
    try:
        run_prepare(run, cfg)  # config.yaml, data splits, θ_0 = the base model (same as every RL run)
        state_path = run.root / CONTROL_FILE
        state = read_json(state_path) or {}
        iters = cfg.iterations
        steps_eval = eval_steps(cfg)
        trained = (
            state.get("done")
            and state.get("budget_seconds") == budget_seconds
            and all((run.policy(k) / "manifest.json").exists() for k in steps_eval)
        )
        if trained:
            log(f"{run.run_id}: SFT already trained ({state.get('steps')} steps), evaluating")
        else:
            state = train_for_budget(
                run,
                cfg,
                seed=seed,
                budget_seconds=budget_seconds,
                lr=lr,
                batch_size=batch_size,
                warmup_steps=warmup_steps,
                corpus_size=corpus_size,
                max_steps=max_steps,
                log=log,
            )
            _write_json_atomic(state_path, state)
        s = Session(run, cfg)
        try:
            # The RL runs' own evaluate stage, iteration by iteration: same due steps, prompts,
            # samples, temperature, sampling seeds and (at the final step) seeded evaluation.
            for k in range(-1, iters):
                if k + 1 not in steps_eval or (trained and run.metrics(k + 1, "evaluate").exists()):
                    continue
                t = time.perf_counter()
                m = evaluate(s, k).metrics
                log(
                    f"iteration {k}/{iters - 1} evaluate {time.perf_counter() - t:.2f}s | "
                    f"eval/accuracy {m.get('eval/accuracy', float('nan')):.4f}"
                )
        finally:
            s.close()
        state["evaluated"] = True
        _write_json_atomic(state_path, state)
    finally:
        run.release_lock()
    log(f"done {run.root}")
    return run


def control_complete(run_root: Path, budget_seconds: float | None = None) -> bool:
    state = read_json(Path(run_root) / CONTROL_FILE) or {}
    if not (state.get("done") and state.get("evaluated")):
        return False
    return budget_seconds is None or state.get("budget_seconds") == budget_seconds


def run_controls(
    specs: Sequence[RunSpec],
    runs_dir: Path,
    parallel: int = 2,
    budget_seconds: float | None = None,
    seeds: Sequence[int] | None = None,
    max_steps: int | None = None,
    corpus_size: int | None = None,
    console: Any = None,
    report_dir: Path | None = None,
) -> tuple[float, list[JobResult]]:
    """One SFT control per seed of `specs`, as subprocesses (same parallelism as the RL runs).

    The budget is the mean training time of the comparison's RL runs unless given. `report_dir`: the
    comparison's report folder, whose archive and protocol record the controls' old defaults
    (recorded_controls). Returns the budget and one JobResult per control.
    """
    if not specs:
        raise ConfigError("no RL runs to match: the SFT control needs the comparison's runs")
    runs_dir = Path(runs_dir).resolve()
    compare_id, preset, base = specs[0].compare_id, specs[0].preset, list(specs[0].base_overrides)
    seeds = sorted({s.seed for s in specs}) if seeds is None else list(seeds)
    if budget_seconds is None:
        secs = train_seconds([s.run_id for s in specs], runs_dir)
        if not secs:
            raise ConfigError(
                f"no timings in the runs of comparison {compare_id!r} under {runs_dir}: "
                "train them first (or pass the control's budget in seconds)"
            )
        budget_seconds = round(sum(secs.values()) / len(secs), 3)
    cfgs = {s.run_id: s.config() for s in specs[:1]}
    kept = recorded_controls(compare_id, preset, base, seeds, runs_dir, report_dir)
    for seed in seeds:
        cfgs[control_run_id(compare_id, seed)] = control_config(preset, base, seed, kept[seed])
    check_same_budget(cfgs, compute_matched(specs))
    jobs = []
    for seed in seeds:
        rid = control_run_id(compare_id, seed)
        root = runs_dir / rid
        done = control_complete(root, float(budget_seconds))
        if not done and archive_record(root) is not None:
            discard_restored(root)  # archived with another budget: this control trains afresh
        write_marker(root, control_marker(compare_id, preset, base, seed))
        cmd = [
            sys.executable,
            "-m",
            "thinking_seeds.experiments.sft_control",
            "--compare-id",
            compare_id,
            "--seed",
            str(seed),
            "--budget-seconds",
            repr(float(budget_seconds)),
            "--preset",
            preset,
            "--runs-dir",
            str(runs_dir),
        ]
        for o in base:
            cmd += ["--set", o]
        for o in kept[seed]:
            cmd += ["--keep", o]
        if max_steps is not None:
            cmd += ["--max-steps", str(max_steps)]
        if corpus_size is not None:
            cmd += ["--corpus-size", str(corpus_size)]
        jobs.append(Job(rid, cmd, root / "train.log", done=done, run_root=root))
    return float(budget_seconds), run_jobs(jobs, runs_dir, parallel, title="SFT controls", console=console)


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Train and evaluate the equal-compute SFT control of a comparison.")
    ap.add_argument("--compare-id", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--budget-seconds", type=float, required=True, help="training wall time to match")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--runs-dir", type=Path, default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    keep_help = "an old default its comparison's record holds (recorded_controls): after --set, not in its marker"
    ap.add_argument("--keep", dest="kept", action="append", default=[], metavar="KEY=VALUE", help=keep_help)
    ap.add_argument(
        "--lr",
        type=float,
        default=None,
        help="default: the base model's warm-up lr; after a cosine warm-up the lr it ended at",
    )
    ap.add_argument("--batch-size", type=int, default=None, help="default: the warm-up's batch size (64)")
    ap.add_argument("--corpus-size", type=int, default=50_000)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many SFT steps (tests)")
    a = ap.parse_args(argv)
    run_sft_control(
        a.compare_id,
        a.seed,
        a.budget_seconds,
        preset=a.preset,
        base_overrides=a.overrides,
        runs_dir=a.runs_dir,
        lr=a.lr,
        batch_size=a.batch_size,
        corpus_size=a.corpus_size,
        max_steps=a.max_steps,
        kept=a.kept,
        log=lambda m: print(m, flush=True),
    )


if __name__ == "__main__":  # pragma: no cover - started by run_controls
    main()
