"""Prefect tasks for evaluating a checkpoint: a held-out split of the run, or the user's own file.

Each task run is named after the policy it evaluates (`evaluate-θ4-test`; the training flow's evaluations
are `evaluate-θ<k>`): the flow resolves "the latest checkpoint" to a step before it calls the task.
"""

from __future__ import annotations

from prefect import task

from thinking_seeds.pipeline.checkpoint_eval import evaluate_checkpoint
from thinking_seeds.pipeline.data_eval import evaluate_checkpoint_on_data


@task(name="evaluate-checkpoint", task_run_name="evaluate-θ{step}-{split}")
def evaluate_checkpoint_task(
    run_dir: str,
    step: int | None = None,
    split: str = "validation",
    seeded: bool | None = None,
    samples: int | None = None,
) -> dict:
    """Evaluate θ_step of a run (default: the latest) on `split` with the run's eval settings; write
    metrics/iteration=<step>/evaluate-<split>.parquet and return the metrics.

    `seeded` adds the explorable-space evaluation (θ_step continuing seeds of its historical pool,
    `eval_seeded/*`); None follows the run's `eval.seeded`, as the final training evaluation does.
    """
    return evaluate_checkpoint(run_dir, step, split, seeded, samples=samples)


@task(name="evaluate-on-data", task_run_name="evaluate-θ{step}-{name}")
def evaluate_data_task(
    run_dir: str,
    data: str,
    name: str,
    step: int,
    reward: str | None = None,
    samples: int | None = None,
    prompts: int | None = None,
    max_new_tokens: int | None = None,
) -> dict:
    """Evaluate θ_step on the verl-schema file `data` (named `name` in the task run): avg@n, pass@k
    and maj@k per data source (thinking_seeds.pipeline.data_eval)."""
    return evaluate_checkpoint_on_data(run_dir, data, step, reward, samples, prompts, max_new_tokens)
