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

The time axis is matched too: the budget is cut into `iterations` equal slices; after slice k the
model is saved as policy step k (where the RL runs evaluate: `eval_due`) and, on the RL runs'
snapshot schedule, into the historical pool, so the seeded (explorable-space) evaluation continues
the control's own earlier checkpoints just as an RL run's continues its own. Per slice it writes
`sft/*` metrics and `time/sft/train` (stage `sft`), so SQL and the comparison report treat the
control like any method.

    python -m thinking_seeds.experiments.sft_control --compare-id C --seed 0 --budget-seconds 120 --runs-dir runs \
        [--set k=v ...] [--keep k=v ...]

`--keep` carries the old value of a changed default that the comparison's record of the control holds
(recorded_controls; experiments/recorded_defaults.py), so a control started before the change trains
and hashes as it started. Over 400 lines: the control's config, its process and the jobs that start it
share its run id and command line, and are kept in one place so the two sides cannot disagree.

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
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.run_dir import RunDir

__all__ = [
    "CONTROL_FILE",
    "control_config",
    "control_run_id",
    "control_spec",
    "recorded_controls",
    "run_controls",
    "run_sft_control",
]

CONTROL_FILE = "control.json"
DEFAULT_LR = 2e-3  # the warm-up's (thinking_seeds.train.warmup), used when the base model has no warmup_report.json
DEFAULT_BATCH = 64


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


def control_spec(compare_id: str, preset: str, base_overrides: Sequence[str], seed: int) -> RunSpec:
    """The control as a RunSpec-like record (for its compare.json marker)."""
    return RunSpec(control_run_id(compare_id, seed), compare_id, CONTROL_METHOD, seed, preset, tuple(base_overrides))


def control_marker(compare_id: str, preset: str, base_overrides: Sequence[str], seed: int) -> dict[str, Any]:
    """compare.json of a control: its method is sft_control, its config the on-policy overlay's."""
    return control_spec(compare_id, preset, base_overrides, seed).marker() | {
        "overrides": control_overrides(base_overrides, seed)
    }


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def eval_steps(cfg: RunConfig) -> list[int]:
    """Policy steps the RL runs evaluate: θ_0 and θ_{k+1} for every k with eval_due(cfg, k)."""
    from thinking_seeds.pipeline.graph import eval_due

    return [0] + [k + 1 for k in range(cfg.iterations) if eval_due(cfg, k)]


def _corpus(run: RunDir, cfg: RunConfig, size: int, seed: int) -> list[tuple[str, str]]:
    """(question, worked solution) pairs of the run's task, none of them a held-out prompt."""
    from thinking_seeds.data.builtin_tasks import BUILTIN_TASKS
    from thinking_seeds.data.sources import load_dataset

    task = BUILTIN_TASKS.get(cfg.data.source)
    if task is not None:
        held_out = task.held_out_keys(run.data_dir / "validation.parquet") | task.held_out_keys(
            run.data_dir / "test.parquet"
        )
        # A stream the warm-up never drew from (it used seed 0): new examples of the same kind.
        return task.warmup_corpus(size, 10_000 + seed, held_out, cfg.data)
    pairs = [(p.user_text, p.target) for p in load_dataset(run.data_dir / "train.parquet") if p.target]
    if not pairs:
        raise ConfigError(
            f"the SFT control needs worked solutions: {run.data_dir / 'train.parquet'} has no `target` column values"
        )
    return pairs


def _hyper(base: Path, lr: float | None, batch_size: int | None) -> tuple[float, int]:
    """The control's lr and batch: the warm-up's. A warm-up with a decaying schedule (the countdown
    base model) is continued at the lr it ended at — more of the same training, not a restart."""
    rep = _read_json(base / "warmup_report.json") or {}
    lr_end = rep.get("final_lr", rep.get("lr", DEFAULT_LR))
    default_lr = lr_end if rep.get("schedule") == "cosine" else rep.get("lr", DEFAULT_LR)
    return (
        float(lr if lr is not None else default_lr),
        int(batch_size if batch_size is not None else rep.get("batch_size", DEFAULT_BATCH)),
    )


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
    import torch

    from thinking_seeds.engine.models import load_model
    from thinking_seeds.pipeline.loop import run_prepare
    from thinking_seeds.pipeline.session import Session
    from thinking_seeds.pipeline.stage_evaluate import evaluate
    from thinking_seeds.store.checkpoints import save_checkpoint
    from thinking_seeds.train.sft import encode_corpus, sft_optimizer, sft_step

    if not (budget_seconds >= 0 and math.isfinite(budget_seconds)):
        raise ConfigError(f"budget_seconds must be a finite number >= 0, got {budget_seconds}")
    cfg = control_config(preset, base_overrides, seed, kept)
    spec = control_spec(compare_id, preset, base_overrides, seed)
    run = RunDir.for_run(spec.run_id, Path(runs_dir).resolve() if runs_dir else None)
    write_marker(run.root, control_marker(compare_id, preset, base_overrides, seed))
    run.acquire_lock()
    try:
        run_prepare(run, cfg)  # config.yaml, data splits, θ_0 = the base model (same as every RL run)
        state_path = run.root / CONTROL_FILE
        state = _read_json(state_path) or {}
        iters = cfg.iterations
        steps_eval = eval_steps(cfg)
        snap_steps = [k for k in range(iters) if k % cfg.pool.snapshot_every == 0]
        trained = (
            state.get("done")
            and state.get("budget_seconds") == budget_seconds
            and all((run.policy(k) / "manifest.json").exists() for k in steps_eval)
        )
        if trained:
            log(f"{run.run_id}: SFT already trained ({state.get('steps')} steps), evaluating")
        else:
            from thinking_seeds.engine.models import resolve_model_path

            lr_, bs = _hyper(resolve_model_path(cfg.model.path), lr, batch_size)
            torch.manual_seed(seed)
            model, tok = load_model(run.policy(0), cfg.model.dtype)
            t_corpus = time.perf_counter()
            pairs = _corpus(run, cfg, corpus_size, seed)
            ids, labels, _ = encode_corpus(tok, pairs)
            answer_tokens = float((labels != -100).sum(-1).float().mean())
            log(
                f"{run.run_id}: corpus of {len(pairs)} solutions in {time.perf_counter() - t_corpus:.1f}s; "
                f"budget {budget_seconds:.1f}s, lr {lr_}, batch {bs}"
            )
            opt, sched = sft_optimizer(model, lr_, warmup_steps)
            gen = torch.Generator().manual_seed(seed)
            if 0 in snap_steps:
                save_checkpoint(
                    model, tok, run.pool_root, 0, extra={"iteration": 0, "control": CONTROL_METHOD}, overwrite=True
                )
            elapsed, steps, seg_steps, seg_loss, seg_secs = 0.0, 0, 0, 0.0, 0.0
            milestones: dict[int, dict[str, float]] = {}
            k = 1  # the next policy step to save, after budget * k / iterations seconds
            while k <= iters:
                if elapsed >= budget_seconds * k / iters or (max_steps is not None and steps >= max_steps):
                    model.eval()
                    if k in steps_eval:
                        save_checkpoint(
                            model,
                            tok,
                            run.policy_root,
                            k,
                            extra={"control": CONTROL_METHOD, "sft_steps": steps},
                            overwrite=True,
                        )
                    if k in snap_steps:
                        save_checkpoint(
                            model,
                            tok,
                            run.pool_root,
                            k,
                            extra={"iteration": k, "control": CONTROL_METHOD},
                            overwrite=True,
                        )
                    metrics = {
                        "sft/steps": float(steps),
                        "sft/samples": float(steps * bs),
                        "sft/tokens": steps * bs * answer_tokens,
                        "sft/lr": lr_,
                        "time/sft/train": seg_secs,
                    }
                    if seg_steps:
                        metrics["sft/loss"] = seg_loss / seg_steps
                    run.write_metrics(k - 1, "sft", metrics)
                    milestones[k] = {"steps": steps, "seconds": elapsed}
                    log(
                        f"iteration {k - 1}/{iters - 1} sft {seg_secs:.2f}s | steps {steps}"
                        + (f", loss {seg_loss / seg_steps:.4f}" if seg_steps else "")
                    )
                    seg_steps, seg_loss, seg_secs = 0, 0.0, 0.0
                    k += 1
                    continue
                t = time.perf_counter()
                loss = sft_step(model, opt, sched, ids, labels, bs, gen, tok.pad_token_id)
                dt = time.perf_counter() - t
                elapsed += dt
                seg_secs += dt
                seg_loss += loss
                seg_steps += 1
                steps += 1
            state = {
                "done": True,
                "budget_seconds": budget_seconds,
                "trained_seconds": elapsed,
                "steps": steps,
                "samples": steps * bs,
                "tokens": steps * bs * answer_tokens,
                "lr": lr_,
                "batch_size": bs,
                "warmup_steps": warmup_steps,
                "corpus_size": len(pairs),
                "max_steps": max_steps,
                "milestones": {str(k): v for k, v in milestones.items()},
            }
            _write_json_atomic(state_path, state)
            del model, opt
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
    state = _read_json(Path(run_root) / CONTROL_FILE) or {}
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
