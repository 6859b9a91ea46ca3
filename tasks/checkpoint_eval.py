"""Prefect task for the nightly evaluation: any policy checkpoint of a run on a chosen split."""

from __future__ import annotations

from prefect import task

from thinking_seeds.pipeline.checkpoint_eval import evaluate_checkpoint


@task(name="evaluate-checkpoint", task_run_name="step-{step}-{split}")
def evaluate_checkpoint_task(
    run_dir: str, step: int | None = None, split: str = "validation", seeded: bool | None = None
) -> dict:
    """Evaluate θ_step of a run (default: the latest) on `split` with the run's eval settings; write
    metrics/iteration=<step>/evaluate-<split>.parquet and return the metrics.

    `seeded` adds the explorable-space evaluation (θ_step continuing seeds of its historical pool,
    `eval_seeded/*`); None follows the run's `eval.seeded`, as the final training evaluation does.
    """
    return evaluate_checkpoint(run_dir, step, split, seeded)
