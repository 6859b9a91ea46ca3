"""Which sequences go into which optimizer step and micro-batch, on which process.

Each process takes every N-th sequence of each mini-batch (N = the number of processes); the loss
is normalised by the *global* mini-batch token (or sequence) count (train/update_loop.py), so the
split never changes the gradient.
"""

from __future__ import annotations

import random

from thinking_seeds.config import RunConfig


def schedule(
    n: int, cfg: RunConfig, epoch: int, rank: int, world: int, order: list[int] | None = None
) -> list[tuple[list[int], list[list[int]]]]:
    """One epoch of the update: per optimizer step, (its mini-batch, this rank's micro-batches).

    `order` is shuffled in place (seeded by run seed and epoch, the same on every rank, so shards
    stay disjoint); train_on_batch passes one list to every epoch (each reshuffles the last order).
    """
    u = cfg.update
    order = list(range(n)) if order is None else order
    random.Random(cfg.seed * 1000 + epoch).shuffle(order)
    n_mb = min(u.mini_batches, len(order))
    steps = []
    for m in range(n_mb):
        mini = order[m * len(order) // n_mb : (m + 1) * len(order) // n_mb]
        shard = mini[rank::world]
        steps.append((mini, [shard[s : s + u.micro_batch_size] for s in range(0, len(shard), u.micro_batch_size)]))
    return steps
