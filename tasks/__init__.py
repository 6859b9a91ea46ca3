"""Prefect tasks: one per stage of docs/algorithm.md §2 (made by `stage_task`), and the checkpoint evaluation.
The work sampled ahead beside an update (pipeline.overlap, pipeline.max_staleness) is no task: a thread of
the flow (pipeline/run_lifecycle.sampled_ahead)."""

from .checkpoint_eval import evaluate_checkpoint_task
from .stage_task import stage_task

prepare_task = stage_task("prepare")  # config.yaml, data splits, θ_0 (once per run)
snapshot_task = stage_task("snapshot")  # θ_k joins the historical pool H
seeds_task = stage_task("seeds")  # pool checkpoints write drafts, cut at λ·|z|
continuation_task = stage_task("continuation")  # θ_k continues every seed; on-policy samples
verify_task = stage_task("verify")  # rewards, statuses, group advantages
update_task = stage_task("update")  # the loss of docs/algorithm.md §3 -> θ_{k+1}
evaluate_task = stage_task("evaluate")  # held-out accuracy and pass@k of θ_{k+1}

__all__ = [
    "prepare_task",
    "snapshot_task",
    "seeds_task",
    "continuation_task",
    "verify_task",
    "update_task",
    "evaluate_task",
    "evaluate_checkpoint_task",
    "stage_task",
]
