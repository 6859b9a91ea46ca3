"""Prefect tasks: one per stage of SPEC §2, thin wrappers over `thinking_seeds.pipeline.loop.run_stage`."""

from .continuation import continuation_task
from .evaluate import evaluate_checkpoint_task, evaluate_task
from .prepare import prepare_task
from .seeds import seeds_task
from .snapshot import snapshot_task
from .update import update_task
from .verify import verify_task

__all__ = ["prepare_task", "snapshot_task", "seeds_task", "continuation_task", "verify_task", "update_task",
           "evaluate_task", "evaluate_checkpoint_task"]
