"""Which sequences go into which optimizer step and micro-batch, on which process.

Each process takes every N-th sequence of each mini-batch (N = the number of processes); the loss
is normalised by the *global* mini-batch token (or sequence) count (train/update_loop.py), so the
split never changes the gradient.

Micro-batches are `update.micro_batch_size` sequences in the shuffled order, or, with
`update.max_tokens_per_micro_batch`, a token budget: a rank's sequences sorted by length and cut
greedily so that each micro-batch's tensor -- rows x (longest context + longest response) in the
padded layout, the sum of its tokens in the packed one -- holds at most that many tokens. Sorting
puts sequences of similar length together, so the padding the padded layout still computes is
small; a sequence longer than the budget trains alone.

Every rank gets the same number of micro-batches (the others' plans are computed here too, from
the same shuffle, with no communication): a DDP/FSDP backward is a collective, so a rank with fewer
micro-batches is given empty ones, which run a zero-loss forward (update_loop.null_backward).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from thinking_seeds.config import RunConfig


def micro_batch_tokens(lengths: Sequence[tuple[int, int]], packed: bool) -> int:
    """Tokens in the forward's input of sequences with these (context, response) lengths."""
    if not lengths:
        return 0
    if packed:
        return sum(c + r for c, r in lengths)
    return len(lengths) * (max(c for c, _ in lengths) + max(r for _, r in lengths))


def token_budget(idx: list[int], lengths: Sequence[tuple[int, int]], budget: int, packed: bool) -> list[list[int]]:
    """`idx` sorted by length (longest first) and cut into micro-batches of at most `budget` tokens."""
    ordered = sorted(idx, key=lambda i: (sum(lengths[i]), lengths[i][1], i), reverse=True)
    out: list[list[int]] = []
    cur: list[int] = []
    rows = total = max_c = max_r = 0  # the running micro-batch: its rows, tokens, longest context and response
    for i in ordered:
        c, r = lengths[i]
        size = total + c + r if packed else (rows + 1) * (max(max_c, c) + max(max_r, r))
        if cur and size > budget:
            out.append(cur)
            cur, rows, total, max_c, max_r = [], 0, 0, 0, 0
        cur.append(i)
        rows, total, max_c, max_r = rows + 1, total + c + r, max(max_c, c), max(max_r, r)
    if cur:
        out.append(cur)
    return out


def schedule(
    n: int,
    cfg: RunConfig,
    epoch: int,
    rank: int,
    world: int,
    order: list[int] | None = None,
    lengths: Sequence[tuple[int, int]] | None = None,
    packed: bool = False,
) -> list[tuple[list[int], list[list[int]]]]:
    """One epoch of the update: per optimizer step, (its mini-batch, this rank's micro-batches).

    `order` is shuffled in place (seeded by run seed and epoch, the same on every rank, so shards
    stay disjoint); train_on_batch passes one list to every epoch (each reshuffles the last order).
    `lengths` (per sequence: context, response) is needed with update.max_tokens_per_micro_batch;
    `packed`: the micro-batches run packed (train/packed_scoring.py), so padding costs no tokens.
    """
    u = cfg.update
    budget = u.max_tokens_per_micro_batch
    if budget is not None and lengths is None:
        raise ValueError("schedule: update.max_tokens_per_micro_batch needs the sequences' lengths")
    order = list(range(n)) if order is None else order
    random.Random(cfg.seed * 1000 + epoch).shuffle(order)
    n_mb = min(u.mini_batches, len(order))
    steps = []
    for m in range(n_mb):
        mini = order[m * len(order) // n_mb : (m + 1) * len(order) // n_mb]
        plans = []
        for r in range(world):
            shard = mini[r::world]
            if budget is not None:
                plans.append(token_budget(shard, lengths, budget, packed))
            else:
                plans.append([shard[s : s + u.micro_batch_size] for s in range(0, len(shard), u.micro_batch_size)])
        longest = max(len(p) for p in plans)
        steps.append((mini, plans[rank] + [[] for _ in range(longest - len(plans[rank]))]))
    return steps
