"""How the HF engine (rollout.py) plans a batch's prefill: which rows share a prefill call, how wide each
call is padded, which contexts are computed once, and how much of a long context is fed through the
decode steps instead. Pure functions of the lengths, tested on their own (tests/unit/test_rollout.py).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "PREFILL_ALIGN",
    "PREFILL_CALL_POSITIONS",
    "group_width",
    "prefill_groups",
    "prefill_width",
    "unique_contexts",
]


# What one more prefill call costs, in positions computed (rows x width): a batch's rows are only
# split into another prefill group where that saves more padding than this.
PREFILL_CALL_POSITIONS = 256
# A prefill group is padded so that its rows sit a multiple of this many positions off where one
# prefill of the whole batch, left-padded, would put them. Torch's CPU attention takes queries in blocks
# of 32 (batches under 192 positions wide; 64 or 256 beyond): aligned so, each row meets the same blocks
# and SIMD lanes, and its K/V and logits are bit for bit those of one padded prefill (tests/unit/
# test_rollout.py). Wider batches and other kernels (GPU) differ by float rounding: 2e-7 in a log-prob
# at 215 positions, 6e-6 unaligned, the same tokens in every case measured (BENCHMARKS.md).
PREFILL_ALIGN = 32


def group_width(width: int, batch_width: int, align: int = PREFILL_ALIGN) -> int:
    """The width a prefill group with contexts up to `width` is padded to in a batch `batch_width` wide."""
    return batch_width - (batch_width - width) // align * align


def prefill_groups(
    lengths: Sequence[int], call_cost: int = PREFILL_CALL_POSITIONS, align: int = PREFILL_ALIGN
) -> list[list[int]]:
    """Row indices in prefill groups of similar context length, shortest first: the split of the rows,
    sorted by length, into runs that minimises the positions computed, sum(rows x group_width) plus
    call_cost per group. Dynamic programming over the distinct lengths (rows of one length always
    share a group: splitting them saves no padding and costs a call), so O(distinct lengths^2)."""
    top = max(lengths, default=0)
    by_len: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_len.setdefault(n, []).append(i)
    lens = sorted(by_len)
    rows_upto = [0]  # rows_upto[j]: rows of the j shortest lengths
    for n in lens:
        rows_upto.append(rows_upto[-1] + len(by_len[n]))
    u = len(lens)
    best, cut = [0] * (u + 1), [0] * (u + 1)
    for j in range(1, u + 1):
        w = group_width(lens[j - 1], top, align)
        best[j], cut[j] = min((best[i] + (rows_upto[j] - rows_upto[i]) * w + call_cost, i) for i in range(j))
    groups, j = [], u
    while j > 0:
        groups.append(sorted(r for n in lens[cut[j] : j] for r in by_len[n]))
        j = cut[j]
    return groups[::-1]


def unique_contexts(contexts: Sequence[Sequence[int]]) -> tuple[list[Sequence[int]], list[list[int]]]:
    """The distinct contexts, in order of first appearance, and the rows that have each."""
    slot: dict[tuple[int, ...], int] = {}
    uniq: list[Sequence[int]] = []
    rows_of: list[list[int]] = []
    for i, c in enumerate(contexts):
        u = slot.setdefault(tuple(c), len(slot))
        if u == len(uniq):
            uniq.append(c)
            rows_of.append([])
        rows_of[u].append(i)
    return uniq, rows_of


def prefill_width(lengths: Sequence[int], limits: Sequence[int]) -> int:
    """How many tokens of each context a batch prefills: the smallest width P that adds no decode step.

    The rows decode in lock-step for max(limits) steps. A row with a long context and a small cap (a
    seed's prefix continued to T - len(prefix)) would otherwise wait through the steps it does not
    need while its whole context widens the prefill and every step's cache for all rows; instead its
    tokens past P are fed through those steps (forced, not sampled). The last of them ends where the
    row's own cap allows: len - P + cap <= max(limits). With equal caps (GRPO, drafts, evaluation)
    P is the longest context: nothing is forced, the batch runs exactly as a plain prefill would."""
    steps = max(limits, default=0)
    need = [n - (steps - m) for n, m in zip(lengths, limits, strict=True) if m > 0]
    return max(1, *need) if need else max(lengths, default=1)
