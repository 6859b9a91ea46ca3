"""The loss's statistics by token population (docs/algorithm.md §5): on-policy samples, the continuations
of seeded samples and their prefixes, each with the gradient lost to clipping, ratios and (effective)
entropy. Sums and counts into `Stats`, reduced once across micro-batches and processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from thinking_seeds.algo.stats import Stats

if TYPE_CHECKING:
    from thinking_seeds.algo.losses import LossInputs

__all__ = ["population_masks", "population_stats"]


def population_masks(inp: LossInputs) -> dict[str, torch.Tensor]:
    """(B, T) masks of the three token populations of docs/algorithm.md §5."""
    resp = inp.response_mask.bool()
    prefix = inp.prefix_mask.bool() & resp
    seeded = inp.seeded.bool()[:, None]
    return {
        "on_policy": resp & ~seeded,
        "continuation": resp & seeded & ~prefix,
        "prefix": prefix,
    }


@torch.no_grad()
def population_stats(
    stats: Stats,
    inp: LossInputs,
    clip_ratio_high: float,
    adv: torch.Tensor,
    ratio: torch.Tensor,
    clipped: torch.Tensor,
    grad_mask: torch.Tensor,
) -> None:
    pops = population_masks(inp)
    abs_adv = adv.abs()
    above = ratio > 1.0 + clip_ratio_high
    # No `if n == 0: continue`: that test would wait for the GPU once per population. An empty
    # population adds count 0 (and a maximum of -inf), which Stats leaves out of the metrics.
    for name, m in list(pops.items()) + [("all", inp.response_mask.bool())]:
        n = m.sum()
        suffix = f"/{name}"
        # Gradient lost to clipping: share of tokens, and of |A|-weighted mass, that the clip zeroes.
        stats.add("actor/pg_clipfrac" + suffix, (clipped & m).sum(), n)
        stats.add("actor/pg_clipfrac_adv" + suffix, (abs_adv * (clipped & m)).sum(), (abs_adv * m).sum())
        stats.add("actor/ratio_mean" + suffix, (ratio * m).sum(), n)
        stats.add("actor/ratio_above_frac" + suffix, (above & m).sum(), n)
        if ratio.numel():  # (a shape, not a value: no sync) max() of no elements is an error
            stats.add("actor/ratio_max" + suffix, ratio.masked_fill(~m, float("-inf")).max())
        stats.add("actor/grad_tokens" + suffix, (grad_mask & m).sum(), n)
        if inp.entropy is not None:
            ent = inp.entropy.detach()
            stats.add("actor/entropy" + suffix, (ent * m).sum(), n)
            # Effective entropy: entropy of the tokens that actually carry gradient.
            g = grad_mask & m
            stats.add("actor/effective_entropy" + suffix, (ent * g).sum(), g.sum())
