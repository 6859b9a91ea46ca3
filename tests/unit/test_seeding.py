"""Where a seed ends (algo/seeding.py): prefix.ratio_of=draft cuts at ⌊λ·|z|⌋; ratio_of=budget cuts at
⌊λ·T⌋ and so needs only the draft's first tokens: a draft stopped there gives the same seed as the
same draft generated to its end (same tokens, same behaviour log-probs), through the sharded engine
calls the seeds stage makes."""

from __future__ import annotations

import random

import pytest
import torch

from thinking_seeds.algo.seeding import budget_tokens, cut_length, seed_length
from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.engine.rollout import HFEngine, SamplingParams
from thinking_seeds.engine.sharding import generate_sharded

EOS = 99


def test_draft_mode_is_the_fraction_of_the_whole_draft():
    z = list(range(20))
    for lam in (0.0, 0.25, 0.5, 0.99, 1.0):
        assert seed_length(z, False, lam, "draft", 64) == cut_length(z, lam) == (20 if lam == 1.0 else int(lam * 20))


def test_budget_mode_cuts_at_the_budget_unless_the_draft_ended_within_it():
    T, lam = 40, 0.5  # budget 20 tokens
    assert budget_tokens(lam, T) == 20 and budget_tokens(1.0, T) == T
    long_draft = list(range(35)) + [EOS]
    assert seed_length(long_draft, True, lam, "budget", T) == 20  # the draft mode would cut at 18
    assert seed_length(long_draft[:20], False, lam, "budget", T) == 20  # the same draft stopped at its budget
    short = list(range(11)) + [EOS]  # ended within the budget: its length is known
    assert seed_length(short, True, lam, "budget", T) == cut_length(short, lam) == 6
    assert seed_length([], False, 0.01, "budget", T) == 0  # budget 0: nothing generated, empty seed
    # λ = 1 (whole trajectories): the whole draft, EOS included, as in the draft mode
    assert seed_length(long_draft, True, 1.0, "budget", T) == len(long_draft)


def test_budget_mode_line_cut_moves_back_to_a_boundary_within_the_budget():
    texts = list("12+3=15\n15-4=11\n11+9=20\n")
    ids = list(range(len(texts)))
    # budget ⌊0.5·40⌋ = 20 tokens: the last boundary in the first 20 is the second newline (16 tokens)
    assert seed_length(ids, False, 0.5, "budget", 40, "line", texts) == 16
    assert seed_length(ids[:20], False, 0.5, "budget", 40, "line", texts[:20]) == 16


class _Runner:
    """generate_sharded's runner on one in-memory engine (no checkpoint to load)."""

    def __init__(self, engine):
        self.engine = engine

    def run(self, checkpoint, shards, timer=None):
        return [self.engine.generate(s.contexts, s.params, s.max_new) for s in shards]


@pytest.mark.parametrize("cut", ["token", "line"])
def test_drafts_stopped_at_their_budget_give_the_same_seeds(cut):
    """The seeds stage's two ways to get a ratio_of=budget seed: generate the draft to its end and
    cut, or stop it at its budget (what the stage does). Same seeds, bit for bit; fewer tokens."""
    tok = char_tokenizer("0123456789+-=ab\n")
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)
    shard = 5  # several shards, each one engine batch, as rollout.batch_size makes them
    engine = HFEngine(model, tok, batch_size=shard)
    rng = random.Random(0)
    prompts = ["1+2=", "34-5+6=", "7=", "9-8+a=", "55+b\n", "3=", "12-1="]
    ctx = [tok(prompts[i % len(prompts)])["input_ids"] for i in range(23)]
    lams = [rng.uniform(0.2, 0.6) for _ in ctx]
    T = 48
    params = SamplingParams(temperature=1.0, max_new_tokens=T, seed=7)
    full = generate_sharded(_Runner(engine), "-", ctx, params, None, shard)
    caps = [budget_tokens(lam, T) for lam in lams]
    stopped = generate_sharded(_Runner(engine), "-", ctx, params, caps, shard)

    def texts(g):
        return [tok.decode([x]) for x in g.token_ids] if cut == "line" else None

    ended_within = cut_short = 0
    for g, s, lam, cap in zip(full, stopped, lams, caps, strict=True):
        L = seed_length(g.token_ids, g.finished, lam, "budget", T, cut, texts(g))
        assert seed_length(s.token_ids, s.finished, lam, "budget", T, cut, texts(s)) == L
        assert s.token_ids[:L] == g.token_ids[:L]
        assert torch.allclose(torch.tensor(s.logprobs[:L]), torch.tensor(g.logprobs[:L]), atol=1e-5)
        assert len(s.token_ids) <= cap
        ended_within += g.finished and len(g.token_ids) <= cap
        cut_short += len(g.token_ids) > cap
    assert ended_within and cut_short, "both cases of the rule must occur, or the check is vacuous"
    assert sum(len(s.token_ids) for s in stopped) < sum(len(g.token_ids) for g in full)
