"""Where a seed ends: cut a historical draft z at L = ⌊λ·|z|⌋ with λ ~ U[ratio_min, ratio_max].

`cut='token'` cuts anywhere. `cut='line'` moves the cut back to the end of the last complete step
(a token ending in a newline, or in ',' / ';' for one-line solutions such as chain_sum's
`a 38-57=-19,-19+10=-9,...`), so a seed never stops half-way through a number. If the draft has
no boundary before L, the seed is empty: the sample is then on-policy in all but name, and
`prefix_len = 0` records that honestly.
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
    while L > 0 and not token_texts[L - 1].endswith(BOUNDARY_CHARS):
        L -= 1
    return L
