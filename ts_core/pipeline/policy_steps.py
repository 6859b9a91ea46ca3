"""Which policy steps a run has: `policy_step` picks one (default the latest) or refuses in one line.

Light on purpose (manifests only: no torch), so `ts eval` refuses a wrong step before loading a model.
The steps are whatever the run's checkpoints are (`store.checkpoint_format.list_checkpoints`), so a
run that keeps a checkpoint only every N iterations lists exactly those.
"""

from __future__ import annotations

from thinking_seeds.store.checkpoint_format import list_checkpoints
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.run_dir import RunDir

__all__ = ["policy_step"]


def policy_step(run: RunDir, step: int | None) -> int:
    """`step` if the run has a policy checkpoint of it (None: the latest); else DataError in one line
    listing the steps it has."""
    steps = [c.step for c in list_checkpoints(run.policy_root)]
    if step is None and steps:
        return steps[-1]
    if step is None:
        raise DataError(f"run {run.run_id!r} has no policy checkpoint yet (none in {run.policy_root}); train it first")
    if step not in steps:
        have = _ranges(steps) or "none: train it first"
        raise DataError(
            f"run {run.run_id!r} has no policy step {step} (it has {have}); "
            "pass --step with one of them, or leave --step out for the latest"
        )
    return step


def _ranges(steps: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out: list[list[int]] = []
    for x in steps:
        if out and out[-1][1] == x - 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)
