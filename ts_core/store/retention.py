"""Checkpoint retention (`checkpoint.keep_last`, `checkpoint.keep_every`): bounded disk per run.

Every update writes θ_{k+1} as `policy/step_XXXXXX/` (weights + optimizer state): ~3.4 MB for the
tiny model, ~1.6 GB for SmolLM2-135M. With a retention policy the update stage, after θ_{k+1} is
written and verified, removes the policy steps nobody needs any more:

    kept: θ_0 (the base: KL reference, evaluation baseline), the last `keep_last` steps (resume
          needs the latest), every `keep_every`-th step (evaluation history), if set, and the step
          the latest update started from (a kill before its manifest is written redoes it).

The historical pool is not touched: its snapshots live in `checkpoints/` (hard links to the
policy files they came from, so pruning a policy step frees nothing a pool member still uses).

A pruned step leaves a tombstone `policy/step_XXXXXX.pruned` holding the checkpoint's hash, so
resume knows the update that wrote it finished and does not redo it (`RunDir._outputs_intact`),
and `ts eval --step` / `ts export --step` can say the step was pruned rather than never written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.checkpoints import list_checkpoints

__all__ = ["TOMBSTONE_SUFFIX", "is_pruned", "prune_policies", "tombstone", "kept_steps"]

TOMBSTONE_SUFFIX = ".pruned"


def tombstone(ckpt_dir: Path) -> Path:
    return ckpt_dir.with_name(ckpt_dir.name + TOMBSTONE_SUFFIX)


def is_pruned(ckpt_dir: Path, expected_hash: str | None = None) -> bool:
    """Whether retention removed this checkpoint (and, given a hash, that it was that checkpoint)."""
    t = tombstone(Path(ckpt_dir))
    if not t.is_file():
        return False
    if expected_hash is None:
        return True
    try:
        return json.loads(t.read_text()).get("hash") == expected_hash
    except (OSError, json.JSONDecodeError):
        return False


def kept_steps(steps: list[int], current: int, keep_last: int, keep_every: int | None) -> set[int]:
    """The policy steps retention keeps when θ_current is the newest."""
    # current - 1 too: the update that wrote θ_current read it, and until that update's manifest is
    # written a kill makes resume redo it from there.
    keep = {0, current - 1} | {s for s in steps if s > current - keep_last}
    if keep_every:
        keep |= {s for s in steps if s % keep_every == 0}
    return keep


def prune_policies(
    policy_root: Path, current: int, keep_last: int | None, keep_every: int | None, file_hash
) -> list[int]:
    """Remove the policy steps outside `kept_steps`; returns the pruned steps. `file_hash(path)`
    is the run directory's hash of a checkpoint (RunDir.file_hash), recorded in the tombstone.

    Crash-safe: the tombstone is written (atomically) before the directory goes, and the directory
    is renamed aside before it is deleted, so a kill leaves either the checkpoint or its tombstone
    (and perhaps a `.old_*` folder, which the next owner's cleanup removes).
    """
    if keep_last is None:
        return []
    steps = [c.step for c in list_checkpoints(policy_root)]
    keep = kept_steps(steps, current, keep_last, keep_every)
    pruned = []
    for step in steps:
        if step in keep:
            continue
        d = policy_root / f"step_{step:06d}"
        t = tombstone(d)
        atomic_write(t, json.dumps({"step": step, "hash": file_hash(d), "pruned_at": current}))
        aside = d.with_name(f".old_{d.name}_pruned")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(d, aside)
        shutil.rmtree(aside, ignore_errors=True)
        pruned.append(step)
    return pruned
