"""Overlong responses (DAPO §3.4): what a response cut off by the token budget does to the update.

A response is *truncated* when it hit `max_new_tokens` without ending (no EOS): its reward says
nothing about the answer it would have given, so a wrong-looking reward there is noise. Modes, by name (`OVERLONG`):

    none   the reward stands as it is (today's behaviour)
    mask   truncated responses carry no gradient: their advantage is zeroed after the group
           statistics (they still count in their group's baseline, as the verifier scored them)
    soft   DAPO's overlong reward shaping: a linear penalty over the last `buffer` tokens before the
           budget, 0 at L <= T - buffer, -factor at L >= T:  r' = r - factor * clip((L - (T - buffer)) / buffer, 0, 1)

Each mode maps (rewards, lengths, truncated) to (the rewards the advantage sees, a bool per sample:
does it carry gradient). Pure torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class OverlongSettings:
    max_len: int  # rollout.max_new_tokens: the budget a truncated response hit
    buffer: int = 16  # reward.overlong_buffer (soft)
    penalty: float = 1.0  # reward.overlong_penalty (soft)


def is_truncated(n_tokens: int, finished: bool | None, last_token: int | None, eos_id: int, max_len: int) -> bool:
    """Hit the budget without ending: the engine's own flag when it generated the end, else (a whole
    historical draft, or a row written before the flag existed) length >= budget and no EOS last."""
    if finished is not None:
        return not finished
    return n_tokens >= max_len and last_token != eos_id


def overlong_none(rewards, lengths, truncated, s: OverlongSettings):
    return rewards, torch.ones_like(truncated, dtype=torch.bool)


def overlong_mask(rewards, lengths, truncated, s: OverlongSettings):
    # DAPO's overlong filtering: the sample stays (its reward in the baseline), its gradient goes.
    return rewards, ~truncated.bool()


def soft_penalty(lengths: torch.Tensor, s: OverlongSettings) -> torch.Tensor:
    """DAPO's overlong buffer penalty (≤ 0): 0 up to T - buffer, then linear down to -penalty at T."""
    start = s.max_len - s.buffer
    over = (lengths.to(torch.float32) - start) / max(1, s.buffer)
    return -s.penalty * over.clamp(0.0, 1.0)


def overlong_soft(rewards, lengths, truncated, s: OverlongSettings):
    return rewards + soft_penalty(lengths, s).to(rewards.dtype), torch.ones_like(truncated, dtype=torch.bool)


OverlongFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, OverlongSettings], tuple[torch.Tensor, torch.Tensor]]
OVERLONG: dict[str, OverlongFn] = {"none": overlong_none, "mask": overlong_mask, "soft": overlong_soft}


def get_overlong(name: str) -> OverlongFn:
    if name not in OVERLONG:
        raise KeyError(f"unknown reward.overlong {name!r}; known: {', '.join(sorted(OVERLONG))}")
    return OVERLONG[name]
