"""The historical pool H (docs/algorithm.md §2.1): which checkpoints may write seeds, and which one writes the next."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np

from thinking_seeds.store.checkpoint_format import CheckpointInfo

__all__ = ["HistoricalPool", "PickRule"]

PickRule = Literal["uniform", "recent", "oldest"]


class HistoricalPool:
    """Which checkpoints may write seeds, and which one writes the next (config `pool.*`).

    Args:
        size: how many of the most recent snapshots older than the current policy are members.
        include_initial: the step-0 checkpoint (the initial model) is always a member, in addition
            to the `size` most recent when it is not already one of them (so up to size + 1).
        pick: 'uniform' (random member), 'recent' (the newest), 'oldest' (the oldest).
    """

    def __init__(self, size: int, include_initial: bool = False, pick: PickRule = "uniform") -> None:
        if pick not in get_args(PickRule):
            raise ValueError(f"pool.pick must be one of {list(get_args(PickRule))}, got {pick!r}")
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"pool.size must be an int >= 0, got {size!r}")
        if size == 0 and not include_initial:
            raise ValueError("pool.size is 0 and pool.include_initial is false: the pool could never hold a checkpoint")
        self.size = size
        self.include_initial = include_initial
        self.pick_rule: PickRule = pick

    def __repr__(self) -> str:
        return f"HistoricalPool(size={self.size}, include_initial={self.include_initial}, pick={self.pick_rule!r})"

    def members(self, checkpoints: Sequence[CheckpointInfo], current_step: int) -> list[CheckpointInfo]:
        """Members for the policy at `current_step`, sorted by step (may be empty).

        Only checkpoints strictly older than current_step qualify: the checkpoint of the current
        policy itself is never historical, and a checkpoint from a later step (left over from a run
        resumed at an earlier step) is not this policy's history.
        """
        steps = [c.step for c in checkpoints]
        if len(set(steps)) != len(steps):
            raise ValueError(f"duplicate checkpoint steps in {sorted(steps)}; pass each checkpoint once")
        older = sorted((c for c in checkpoints if c.step < current_step), key=lambda c: c.step)
        chosen = older[-self.size :] if self.size > 0 else []
        if self.include_initial and current_step > 0 and (not chosen or chosen[0].step != 0):
            if not older or older[0].step != 0:
                raise ValueError(
                    f"pool.include_initial is set but there is no step-0 checkpoint among steps {steps}; "
                    f"save the initial model with save_checkpoint(..., step=0) before training, or set "
                    f"pool.include_initial to false"
                )
            chosen = [older[0], *chosen]
        return chosen

    def pick(self, members: Sequence[CheckpointInfo], rng: random.Random | np.random.Generator) -> CheckpointInfo:
        """Choose the checkpoint that writes one seed, by the pool's pick rule."""
        if not members:
            raise ValueError(
                "the historical pool is empty: no checkpoint is older than the current policy. Snapshot "
                "before the first seeded iteration (save step 0 and set pool.include_initial), snapshot "
                "more often (pool.snapshot_every), or start seeding after the first snapshot"
            )
        ordered = sorted(members, key=lambda c: c.step)  # the same rng gives the same pick whatever the input order
        if self.pick_rule == "recent":
            return ordered[-1]
        if self.pick_rule == "oldest":
            return ordered[0]
        if isinstance(rng, random.Random):
            return ordered[rng.randrange(len(ordered))]
        if isinstance(rng, np.random.Generator):
            return ordered[int(rng.integers(len(ordered)))]
        raise TypeError(f"rng must be random.Random or numpy.random.Generator, got {type(rng).__name__}")

    def select(
        self, checkpoints: Sequence[CheckpointInfo], current_step: int, rng: random.Random | np.random.Generator
    ) -> CheckpointInfo:
        """members() then pick(), with the step in the error when the pool is empty."""
        members = self.members(checkpoints, current_step)
        if not members:
            raise ValueError(
                f"the historical pool is empty at step {current_step} (checkpoints at steps "
                f"{sorted(c.step for c in checkpoints)}); the current policy is never historical. Save step 0 "
                f"and set pool.include_initial, snapshot more often (pool.snapshot_every), or start seeding later"
            )
        return self.pick(members, rng)
