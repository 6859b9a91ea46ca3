"""Where seeds come from, planned once for training (the seeds stage) and for seeded evaluation.

A plan draws, for each prompt and seed slot in a fixed order, a pool member (its source step) and a
λ; the draws' order is part of the run's seed, so training and evaluation draw the same way. The
drafts of one source are one engine call (its contexts, sampling parameters with their own seed, and
with prefix.ratio_of=budget each draft's token cap); `seed_tokens` cuts a finished draft into its
seed (algo/seeding.py: token, line or steps). The seeds stage scores the drafts and writes
PrefixRows; the evaluation continues the seeds with the policy it evaluates.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from thinking_seeds.algo.seeding import budget_tokens, draw_ratio, seed_length
from thinking_seeds.config import RunConfig
from thinking_seeds.data.sources import Prompt
from thinking_seeds.engine.models import encode_prompt
from thinking_seeds.engine.rollout import Generation, SamplingParams
from thinking_seeds.store.checkpoints import CheckpointInfo
from thinking_seeds.store.historical_pool import HistoricalPool


@dataclass(frozen=True)
class SeedDraw:
    """One seed slot: its prompt, its index among the prompt's slots, who drafts it and λ."""

    prompt: Prompt
    index: int
    source_step: int
    ratio: float


@dataclass(frozen=True)
class DraftCall:
    """One engine call: every draft of one source, in plan order (`draws`: indices into the plan)."""

    source_step: int
    draws: list[int]
    contexts: list[list[int]]
    params: SamplingParams
    caps: list[int] | None


def draw_seeds(
    prompts: Sequence[Prompt],
    n: int,
    pool: HistoricalPool,
    members: Sequence[CheckpointInfo],
    rng: random.Random,
    ratio_range: tuple[float, float],
    own_step: int,
) -> list[SeedDraw]:
    """`n` draws per prompt: a pool member, then λ, per slot (with no member, `own_step` drafts)."""
    lo, hi = ratio_range
    out = []
    for p in prompts:
        for j in range(n):
            step = pool.pick(members, rng).step if members else own_step
            out.append(SeedDraw(p, j, step, draw_ratio(rng, lo, hi)))
    return out


def draft_calls(
    cfg: RunConfig,
    tokenizer,
    plan: Sequence[SeedDraw],
    seed_of: Callable[[int], int],
    temperature: float,
    top_p: float,
) -> list[DraftCall]:
    """The plan's engine calls, one per source step in ascending order; `seed_of(step)`: its sampling seed.
    With prefix.ratio_of=budget each draft stops at its cut ⌊λ·T⌋ (the tokens before it are the same)."""
    T = cfg.rollout.max_new_tokens
    by_source: dict[int, list[int]] = defaultdict(list)
    for i, d in enumerate(plan):
        by_source[d.source_step].append(i)
    encoded: dict[str, list[int]] = {}  # a prompt's context, encoded once for all its slots

    def context(p: Prompt) -> list[int]:
        if p.prompt_id not in encoded:
            encoded[p.prompt_id] = encode_prompt(tokenizer, p.chat())
        return encoded[p.prompt_id]

    calls = []
    for step, idx in sorted(by_source.items()):
        ctx = [context(plan[i].prompt) for i in idx]
        params = SamplingParams(temperature, top_p, T, seed=seed_of(step))
        caps = [budget_tokens(plan[i].ratio, T) for i in idx] if cfg.prefix.ratio_of == "budget" else None
        calls.append(DraftCall(step, idx, ctx, params, caps))
    return calls


def seed_tokens(cfg: RunConfig, tokenizer, draft: Generation, ratio: float) -> int:
    """How many leading tokens of `draft` form its seed (prefix.cut, prefix.ratio_of, prefix.steps)."""
    pre = cfg.prefix
    pieces = [tokenizer.decode([x]) for x in draft.token_ids] if pre.cut != "token" else None
    T = cfg.rollout.max_new_tokens
    return seed_length(draft.token_ids, draft.finished, ratio, pre.ratio_of, T, pre.cut, pieces, pre.steps)
