"""Where a seed ends: cut a historical draft z at L = ⌊λ·|z|⌋ with λ ~ U[ratio_min, ratio_max].

`cut='token'` cuts anywhere. `cut='line'` moves the cut back to the end of the last complete step
(a token ending in a newline, or in ',' / ';' for one-line solutions such as chain_sum's
`a 38-57=-19,-19+10=-9,...`), so a seed never stops half-way through a number. If the draft has
no boundary before L, the seed is empty: the sample is then on-policy in all but name, and
`prefix_len = 0` records that honestly.

What λ is a fraction of (`prefix.ratio_of`): `draft`, the whole draft's length |z| (the draft must be
generated to its end before the cut is known), or `budget`, rollout.max_new_tokens T: the cut is then
known before sampling, B = ⌊λ·T⌋, so the draft is generated only up to B tokens (`budget_tokens`) and
`seed_length` cuts it there. A draft that ends (EOS) within its budget is cut at ⌊λ·|z|⌋ as with
`draft`, since its end is known. `seed_length` reads only the first B tokens of a draft, so a draft
stopped at B and the same draft generated to its end give the same seed (tests/unit/test_seeding.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

BOUNDARY_CHARS = ("\n", ",", ";")


def draw_ratio(rng: random.Random, ratio_min: float, ratio_max: float) -> float:
    return ratio_min if ratio_min == ratio_max else rng.uniform(ratio_min, ratio_max)


def cut_length(
    draft_ids: Sequence[int],
    ratio: float,
    cut: Literal["token", "line"] = "token",
    token_texts: Sequence[str] | None = None,
) -> int:
    """How many leading tokens of the draft form the seed.

    `token_texts[i]` is the decoded text of draft token i (needed for cut='line').
    λ = 1 keeps the whole draft (sequence-level mixing); the draft's EOS is then kept too.
    """
    n = len(draft_ids)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"prefix ratio must be in [0, 1], got {ratio}")
    L = n if ratio >= 1.0 else int(math.floor(ratio * n))
    if cut == "token" or ratio >= 1.0:
        return L
    if token_texts is None or len(token_texts) != n:
        raise ValueError("cut='line' needs the decoded text of every draft token")
    return _back_to_boundary(L, token_texts)


def _back_to_boundary(L: int, token_texts: Sequence[str]) -> int:
    while L > 0 and not token_texts[L - 1].endswith(BOUNDARY_CHARS):
        L -= 1
    return L


def budget_tokens(ratio: float, max_new_tokens: int) -> int:
    """prefix.ratio_of=budget: how many draft tokens to generate at all, B = ⌊λ·max_new_tokens⌋."""
    return max_new_tokens if ratio >= 1.0 else int(math.floor(ratio * max_new_tokens))


def seed_length(
    draft_ids: Sequence[int],
    finished: bool,
    ratio: float,
    ratio_of: Literal["draft", "budget"],
    max_new_tokens: int,
    cut: Literal["token", "line"] = "token",
    token_texts: Sequence[str] | None = None,
) -> int:
    """How many leading tokens of the draft form the seed, for either `prefix.ratio_of`.

    `finished`: the draft ended with EOS (not at a token cap). With ratio_of=budget, a draft that ended
    within its budget B is cut at ⌊λ·|z|⌋ (its length is known), any other at B, moved back to a step
    boundary with cut='line'; only the first B tokens are read, so `draft_ids` may be stopped at B.
    """
    if ratio_of == "draft":
        return cut_length(draft_ids, ratio, cut, token_texts)
    budget = budget_tokens(ratio, max_new_tokens)
    if finished and len(draft_ids) <= budget:
        return cut_length(draft_ids, ratio, cut, token_texts)
    L = min(budget, len(draft_ids))
    if cut == "token" or ratio >= 1.0:
        return L
    if token_texts is None or len(token_texts) < L:
        raise ValueError("cut='line' needs the decoded text of the draft's first tokens")
    return _back_to_boundary(L, token_texts)
