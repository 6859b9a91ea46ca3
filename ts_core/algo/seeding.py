"""Where a seed ends: cut a historical draft z at L = ⌊λ·|z|⌋ with λ ~ U[ratio_min, ratio_max].

`cut='token'` cuts anywhere. `cut='line'` moves the cut back to the end of the last complete step
(a token ending in a newline, or in ',' / ';' for one-line solutions such as chain_sum's
`a 38-57=-19,-19+10=-9,...`), so a seed never stops half-way through a number. If the draft has
no boundary before L, the seed is empty: the sample is then on-policy in all but name, and
`prefix_len = 0` records that honestly.

`cut='steps'` ignores λ and cuts after exactly `steps` complete step lines (each ended by a newline:
a ',' inside a line is no step here), none of which may hold the boxed answer: on the 24 game a one-step seed leaves the
continuation a real 3-number subproblem, while after two steps the seed decides the outcome
(docs/results/game24-step-cut-probe.md). A draft with fewer steps before its answer gives an empty
seed, whose slot the continuation stage fills with an on-policy sample.

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
ANSWER_MARKER = "\\boxed"  # a step line that holds it is the answer, not a step
Cut = Literal["token", "line", "steps"]


def draw_ratio(rng: random.Random, ratio_min: float, ratio_max: float) -> float:
    return ratio_min if ratio_min == ratio_max else rng.uniform(ratio_min, ratio_max)


def cut_length(
    draft_ids: Sequence[int],
    ratio: float,
    cut: Cut = "token",
    token_texts: Sequence[str] | None = None,
    steps: int = 1,
) -> int:
    """How many leading tokens of the draft form the seed.

    `token_texts[i]` is the decoded text of draft token i (needed for cut='line' and cut='steps').
    λ = 1 keeps the whole draft (sequence-level mixing); the draft's EOS is then kept too.
    """
    n = len(draft_ids)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"prefix ratio must be in [0, 1], got {ratio}")
    if cut == "steps":
        if token_texts is None or len(token_texts) != n:
            raise ValueError("cut='steps' needs the decoded text of every draft token")
        return after_steps(token_texts, steps) or 0
    L = n if ratio >= 1.0 else int(math.floor(ratio * n))
    if cut == "token" or ratio >= 1.0:
        return L
    if token_texts is None or len(token_texts) != n:
        raise ValueError("cut='line' needs the decoded text of every draft token")
    return _back_to_boundary(L, token_texts)


def after_steps(token_texts: Sequence[str], steps: int) -> int | None:
    """How many leading tokens hold exactly `steps` complete step lines (the token that ends the
    last one included); None when the draft has fewer, or one of them holds the answer."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    done, text = 0, ""
    for i, piece in enumerate(token_texts):
        text += piece
        if ANSWER_MARKER in text:
            return None
        if piece.endswith("\n"):
            done += 1
            if done == steps:
                return i + 1
    return None


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
    cut: Cut = "token",
    token_texts: Sequence[str] | None = None,
    steps: int = 1,
) -> int:
    """How many leading tokens of the draft form the seed, for either `prefix.ratio_of`.

    `finished`: the draft ended with EOS (not at a token cap). With ratio_of=budget, a draft that ended
    within its budget B is cut at ⌊λ·|z|⌋ (its length is known), any other at B, moved back to a step
    boundary with cut='line'; only the first B tokens are read, so `draft_ids` may be stopped at B.
    """
    if ratio_of == "draft":
        return cut_length(draft_ids, ratio, cut, token_texts, steps)
    if cut == "steps":
        raise ValueError("cut='steps' reads the whole draft's step lines: use ratio_of='draft'")
    budget = budget_tokens(ratio, max_new_tokens)
    if finished and len(draft_ids) <= budget:
        return cut_length(draft_ids, ratio, cut, token_texts)
    L = min(budget, len(draft_ids))
    if cut == "token" or ratio >= 1.0:
        return L
    if token_texts is None or len(token_texts) < L:
        raise ValueError("cut='line' needs the decoded text of the draft's first tokens")
    return _back_to_boundary(L, token_texts)
