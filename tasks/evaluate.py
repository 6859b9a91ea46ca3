"""Prefect tasks for evaluation: the evaluate stage of an iteration, and a checkpoint evaluation.

- `evaluate_task`: the stage (SPEC §2.6) — held-out accuracy and pass@k of θ_{k+1} every
  `eval.every` iterations (k = -1 evaluates θ_0); cached like every stage.
- `evaluate_checkpoint_task`: any policy checkpoint of a run (default the latest) on a chosen
  split, for the nightly `evaluate_flow`; writes metrics/iteration=<step>/evaluate-<split>.parquet.
"""

from __future__ import annotations

from prefect import task

from thinking_seeds.pipeline.checkpoint_eval import evaluate_checkpoint

from .common import STAGE_TASK_OPTIONS, Upstream, execute_stage


@task(name="evaluate", **STAGE_TASK_OPTIONS)
def evaluate_task(run_dir: str, k: int, config_hash: str, upstream: Upstream) -> dict:
    """Run (or skip, if done or not due) the evaluate stage of iteration k; returns its manifest."""
    return execute_stage("evaluate", run_dir, k, config_hash, upstream)


@task(name="evaluate-checkpoint", task_run_name="step-{step}-{split}")
def evaluate_checkpoint_task(run_dir: str, step: int | None = None, split: str = "validation",
                             seeded: bool | None = None) -> dict:
    """Evaluate θ_step of a run on `split` with the run's eval settings; write and return the metrics.

    `seeded` adds the explorable-space evaluation (θ_step continuing seeds of its historical pool,
    `eval_seeded/*`); None follows the run's `eval.seeded`, as the final training evaluation does.
    """
    return evaluate_checkpoint(run_dir, step, split, seeded)
