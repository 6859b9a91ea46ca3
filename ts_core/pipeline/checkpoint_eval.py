"""Evaluate one policy checkpoint of a run on a held-out split, after (or during) training.

Two users: the nightly evaluation flow (`tasks.checkpoint_eval.evaluate_checkpoint_task`: the latest
checkpoint with the run's own eval settings) and the comparison's final test evaluation
(`thinking_seeds.experiments.compare.run_final_tests`: every run's final policy on the *whole* test split).

Why a separate final test: the in-training evaluation uses `eval.prompts` validation prompts
(64 x 16 samples on the CPU preset), whose sampling noise alone is about ±0.012 in accuracy —
as large as the differences between methods. The whole 256-prompt test split x 16 samples
quarters the variance and never influenced any setting.

    python -m thinking_seeds.pipeline.checkpoint_eval runs/main-grpo-s0 --split test --all-prompts --stage final-test
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError, load_saved_config
from thinking_seeds.config.sections_loop import MAX_EVAL_SEQUENCES
from thinking_seeds.pipeline.policy_steps import policy_step
from thinking_seeds.pipeline.session import Session, Timer
from thinking_seeds.pipeline.stage_evaluate import evaluate_policy, time_metrics
from thinking_seeds.store.checkpoints import list_checkpoints
from thinking_seeds.store.run_dir import RunDir

# The final evaluation of a policy on the whole test split (its metrics stage name): a comparison's
# headline numbers (thinking_seeds.experiments.compare) and `thinking_seeds.pipeline.loop --final-test`.
FINAL_TEST_STAGE = "final-test"
# A compute-matched run's earlier checkpoint, at the iteration count of the methods it is matched with,
# tested like a final policy (experiments/equal_iterations.py explains why).
EQUAL_ITERATIONS_STAGE = "final-test-equal-iterations"


def per_prompt_path(run: RunDir, stage: str, step: int) -> Path:
    """Where an evaluation's per-prompt rows go (thinking_seeds.store.schemas.PER_PROMPT_SCHEMA)."""
    return run.root / "evals" / stage / f"step_{step:06d}.parquet"


def latest_policy_step(run: RunDir) -> int:
    ckpts = list_checkpoints(run.policy_root)
    if not ckpts:
        raise FileNotFoundError(f"run {run.root} has no policy checkpoint under {run.policy_root}; train it first")
    return ckpts[-1].step


def _check_responses(prompts: int, samples: int, what: str) -> None:
    """ConfigError, in one line, for more responses than an evaluation may hold (EvalConfig's bound: every
    response is kept until scored), before the model is loaded."""
    if prompts * samples > MAX_EVAL_SEQUENCES:
        raise ConfigError(
            f"{what} = {prompts * samples:,} responses held at once, more than {MAX_EVAL_SEQUENCES:,}; lower "
            "--samples (eval.test_samples for a run's final test)"
        )


def evaluate_checkpoint(
    run_dir: str | Path,
    step: int | None = None,
    split: str = "validation",
    seeded: bool | None = None,
    all_prompts: bool = False,
    stage: str | None = None,
    samples: int | None = None,
) -> dict[str, Any]:
    """Evaluate θ_step of a run (default: its latest checkpoint) on `split`; write and return the metrics.

    Uses the run's saved eval settings (samples, temperature, sampling seed), except the split,
    and every prompt of the split with `all_prompts`. `seeded` adds the explorable-space
    evaluation (`eval_seeded/*`); None follows the run's `eval.seeded`. Metrics go to
    `metrics/iteration=<step>/<stage>.parquet`, stage default `evaluate-<split>`, and one row per
    prompt to `evals/<stage>/step_<step>.parquet`. `samples` overrides eval.samples (pass@k up to it).
    Returns {"run_id", "step", "split", "path" (relative to the run dir), "metrics"}.
    """
    run = RunDir(Path(run_dir))
    if not run.config_path.exists():
        raise FileNotFoundError(f"{run.root} is not a run directory (no config.yaml); check the run id and TS_RUNS_DIR")
    step = policy_step(run, step)
    split_path = run.data_dir / f"{split}.parquet"
    if not split_path.exists():
        have = sorted(p.stem for p in run.data_dir.glob("*.parquet"))
        raise FileNotFoundError(f"run {run.run_id} has no {split!r} split (it has {have})")
    cfg = load_saved_config(run.config_path)
    cfg.eval.split = split  # validated assignment: only validation | test
    n = cfg.eval.samples if samples is None else samples
    s = Session(run, cfg)
    try:
        prompts = len(s.prompts(split)) if all_prompts else cfg.eval.prompts
        _check_responses(prompts, n, f"{prompts} {split} prompts x {n} samples")
        cfg.eval = cfg.eval.model_copy(update={"prompts": prompts, "samples": n})  # checked together, just above
        t = Timer()
        per_prompt = per_prompt_path(run, stage or f"evaluate-{split}", step)
        metrics = evaluate_policy(
            s, step, t, seeded=cfg.eval.seeded if seeded is None else seeded, per_prompt_out=per_prompt
        )
    finally:
        s.close()
    metrics["eval/prompts"] = float(cfg.eval.prompts)
    metrics.update(time_metrics(t))
    path = run.write_metrics(step, stage or f"evaluate-{split}", metrics)
    return {"run_id": run.run_id, "step": step, "split": split, "path": run.rel(path), "metrics": metrics}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Evaluate a policy checkpoint of a run on a held-out split.")
    ap.add_argument("run_dir", help="the run directory (runs/<id>)")
    ap.add_argument("--step", type=int, default=None, help="policy step (default: the latest checkpoint)")
    ap.add_argument("--split", default="test", choices=["validation", "test"])
    ap.add_argument("--all-prompts", action="store_true", help="every prompt of the split, not eval.prompts")
    ap.add_argument(
        "--seeded",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also the explorable-space (seeded) evaluation",
    )
    ap.add_argument("--stage", default=None, help="metrics stage name (default evaluate-<split>)")
    ap.add_argument("--samples", type=int, default=None, help="samples per prompt (default: the run's eval.samples)")
    a = ap.parse_args()
    out = evaluate_checkpoint(a.run_dir, a.step, a.split, a.seeded, a.all_prompts, a.stage, a.samples)
    m = out["metrics"]
    print(
        f"{out['run_id']} θ_{out['step']} on {int(m['eval/prompts'])} {a.split} prompts: "
        f"accuracy {m['eval/accuracy']:.4f} -> {out['path']}"
    )


if __name__ == "__main__":
    main()
