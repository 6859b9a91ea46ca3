"""Dynamic sampling (DAPO §3.2, verl's `filter_groups`): keep only groups that carry a learning signal.

A group whose rewards are all equal (every sample right, or every sample wrong, seeded samples
included) has zero advantage everywhere under a group-relative estimator: it costs a forward and
backward and moves nothing but the entropy bonus and the token-mean's denominator. The pipeline
(pipeline/oversample.py) drops such groups and samples further prompts, round after round, until
the batch holds `rollout.prompts_per_iteration` informative groups or `rollout.max_rounds` is spent.
Pure functions here; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence


def informative_groups(prompt_ids: Sequence[str], rewards: Sequence[float], tol: float = 0.0) -> dict[str, bool]:
    """For each prompt (in first-seen order): whether its group's rewards differ (max - min > tol).

    A group of one sample has no variance and is not informative (its advantage is 0 too)."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for p, r in zip(prompt_ids, rewards, strict=True):
        lo[p] = min(lo.get(p, r), r)
        hi[p] = max(hi.get(p, r), r)
    return {p: hi[p] - lo[p] > tol for p in lo}


def round_quota(target: int, kept: int) -> int:
    """Prompts to draw in the next round: the informative groups still missing (DAPO draws whole
    generation batches; drawing the deficit wastes fewer tokens on groups that would be cut)."""
    return max(0, target - kept)
