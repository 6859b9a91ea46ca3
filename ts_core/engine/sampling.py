"""How the HF engine (rollout.py) draws a token for each row: top-p truncation, then one uniform per row
mapped through the row's cumulative distribution.

A decode step draws one uniform for *every* request of the batch, live or done, and a row takes the one
at its own index. So what a row samples depends on its context, its own earlier tokens and the seed,
never on which other rows are still in the batch: rows can leave the batch when they are done
(kv_cache.py) without changing the others' samples, and a draft stopped at its cut is the full draft's
beginning (tests/unit/test_seeding.py). `torch.multinomial` draws per (row, vocabulary entry), so its
draws move with the batch's shape.
"""

from __future__ import annotations

import torch

__all__ = ["sample_rows", "top_p_filter"]


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail of each row outside the smallest set with mass >= top_p (renormalised later)."""
    if top_p >= 1.0:
        return probs
    sorted_p, idx = probs.sort(dim=-1, descending=True)
    cum = sorted_p.cumsum(-1)
    drop = cum - sorted_p > top_p  # keep the token that crosses the threshold
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter(-1, idx, sorted_p)


def sample_rows(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` (rows x vocabulary, non-negative, not necessarily normalised) by the
    inverse of its cumulative distribution at `uniforms` (one per row, in [0, 1); float64, so that a
    token of mass 1e-9 has its own slice: float32 uniforms come in steps of 2^-24).

    The point is x = (1 - u) * total, in (0, total]; the token is the first whose cumulative mass reaches
    it. A token of zero mass never is: its cumulative sum equals its predecessor's, which reached x first.
    The sums are taken in float64, so a 152k vocabulary's tail keeps its mass (float32 would round the
    last entries' increments away)."""
    cdf = probs.double().cumsum(-1)
    x = (1.0 - uniforms.double()) * cdf[:, -1]
    return torch.searchsorted(cdf, x[:, None]).squeeze(-1).clamp_(max=probs.shape[-1] - 1)
