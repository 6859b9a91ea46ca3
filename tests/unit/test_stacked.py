"""The HF engine's drafts for several checkpoints in one decode (engine/stacked.py): the same samples as a
weight swap and a call per checkpoint, a model that does not stack falls back, members are read once."""

import pytest
import torch
from safetensors.torch import save_file
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from thinking_seeds.engine import rollout
from thinking_seeds.engine.decode import kept_rows
from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.engine.rollout import HFEngine, SamplingParams
from thinking_seeds.engine.stacked import StackedModel


def _tok():
    return char_tokenizer("0123456789+-=ab\n")


def _llama(tok):
    return tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)


def _qwen2(tok):  # q/k/v projections with a bias: the stacked Linear's bias path
    cfg = Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=128, tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(1)
    return Qwen2ForCausalLM(cfg)


def _checkpoints(model, root, n):
    """n checkpoints of `model`'s shapes with weights of their own (tied ones saved once, as ours are)."""
    tied = model.config.tie_word_embeddings
    base = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight" or not tied}
    out = []
    for j in range(n):
        g = torch.Generator().manual_seed(j)
        d = root / f"m{j}"
        d.mkdir()
        weights = {k: v + 0.3 * torch.randn(v.shape, generator=g) for k, v in base.items()}
        save_file(weights, str(d / "model.safetensors"))
        out.append(d)
    return out


def _jobs(tok, checkpoints):
    texts = ["1+2=", "34-5+6=", "7=", "12+1-3=", "9-9="]
    jobs = []
    for j, ck in enumerate(checkpoints):
        n = 3 + 4 * j  # 3, 7, 11 rows: with batch_size 4, one job is one, two or three engine batches
        ctx = [tok(texts[(i + j) % len(texts)])["input_ids"] for i in range(n)]
        caps = [2 + (5 * i + j) % 11 for i in range(n)]  # rows end at different steps: sheddings
        jobs.append((ck, ctx, SamplingParams(temperature=1.3, max_new_tokens=12, seed=40 + j), caps))
    return jobs


def _swapped(eng, jobs):
    out = []
    for ck, ctx, p, caps in jobs:
        eng.load_weights(ck)
        out.append(eng.generate(ctx, p, caps))
    return out


@pytest.mark.parametrize("build", [_llama, _qwen2])
def test_stacked_checkpoints_sample_what_a_swap_per_checkpoint_samples(build, tmp_path):
    tok = _tok()
    eng = HFEngine(build(tok), tok, batch_size=4)
    jobs = _jobs(tok, _checkpoints(eng.model, tmp_path, 3))
    want = _swapped(eng, jobs)
    got = eng.generate_many(jobs)
    assert isinstance(eng._stacked, StackedModel)  # the stacked decode ran, not the fallback
    assert [[g.token_ids for g in x] for x in got] == [[g.token_ids for g in x] for x in want]
    assert [[g.finished for g in x] for x in got] == [[g.finished for g in x] for x in want]
    for x, y in zip(got, want, strict=True):
        for a, b in zip(x, y, strict=True):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    # the checkpoints differ, so the rows did not all run under one of them
    assert [g.token_ids for g in eng.generate_many([(jobs[0][0], *jobs[1][1:])])[0]] != [g.token_ids for g in got[1]]


def test_a_model_whose_norm_is_another_formula_is_not_stacked(tmp_path):
    """A norm named *RMSNorm that scales by (1 + w), as Gemma's does: the probe finds the difference and the
    engine swaps weights call after call, with the same samples."""
    tok = _tok()
    model = _llama(tok)

    class OnePlusRMSNorm(nn.Module):
        def __init__(self, norm):
            super().__init__()
            self.weight, self.variance_epsilon = norm.weight, norm.variance_epsilon

        def forward(self, x):
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
            return (1 + self.weight) * h

    model.model.norm = OnePlusRMSNorm(model.model.norm)
    eng = HFEngine(model, tok, batch_size=4)
    jobs = _jobs(tok, _checkpoints(model, tmp_path, 2))
    want = _swapped(eng, jobs)
    got = eng.generate_many(jobs)
    assert eng._stacked is False
    assert [[g.token_ids for g in x] for x in got] == [[g.token_ids for g in x] for x in want]


def test_a_model_too_large_to_stack_swaps_weights(tmp_path, monkeypatch):
    tok = _tok()
    eng = HFEngine(_llama(tok), tok, batch_size=4)
    jobs = _jobs(tok, _checkpoints(eng.model, tmp_path, 2))
    monkeypatch.setattr(rollout, "MAX_STACKED_BYTES", 3 * StackedModel(eng.model).model_bytes)  # < 2 x 2 copies
    monkeypatch.setattr(StackedModel, "build", lambda model: pytest.fail("a model too large is never copied"))
    swaps = []
    load = eng.load_weights
    monkeypatch.setattr(eng, "load_weights", lambda ck: (swaps.append(ck), load(ck)))
    got = eng.generate_many(jobs)
    assert swaps == [jobs[0][0], jobs[1][0]]  # a swap and a call per checkpoint
    assert eng._stacked is False  # not even built: two copies would not fit, and nothing was copied
    assert [len(x) for x in got] == [3, 7]


def test_stacked_members_are_read_once_and_restacked_on_a_change(tmp_path, monkeypatch):
    tok = _tok()
    eng = HFEngine(_llama(tok), tok, batch_size=64)
    cks = _checkpoints(eng.model, tmp_path, 3)
    reads = []
    read = eng._params_of
    monkeypatch.setattr(eng, "_params_of", lambda ck: (reads.append(ck.name), read(ck))[1])
    p = SamplingParams(max_new_tokens=4, seed=1)
    ctx = [tok("1+2=")["input_ids"]] * 2
    eng.generate_many([(cks[0], ctx, p, None), (cks[1], ctx, p, None)])
    eng.generate_many([(cks[0], ctx, p, None), (cks[1], ctx, p, None)])
    assert reads == ["m0", "m1"]  # the same pool: nothing read again
    eng.generate_many([(cks[1], ctx, p, None), (cks[2], ctx, p, None)])
    assert reads == ["m0", "m1", "m2"]  # a new member joins: only it is read
    assert set(eng._stacked.held) == {eng._source(cks[1])[0], eng._source(cks[2])[0]}  # m0 is let go


def test_a_shedding_keeps_every_row_group_live_first_and_equal():
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    done = torch.tensor([1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1], dtype=torch.bool)
    keep = kept_rows(group, done, 3, int((~done).sum()))
    # the liveliest group has 2 live rows: every group keeps 2, its live rows first, in slot order
    assert keep.tolist() == [1, 0, 4, 5, 8, 10]
    assert kept_rows(group, torch.zeros(12, dtype=torch.bool), 3, 12) is None  # nothing done: no shedding
    assert kept_rows(None, done, 1, 3).tolist() == [1, 8, 10]  # one group: exactly its live rows


def test_batches_beyond_the_stacking_budget_decode_in_turns(tmp_path, monkeypatch):
    """With room for two stacked copies only, five engine batches decode two at a time, the last one alone
    on the stacked model: the same samples as a swap per checkpoint."""
    tok = _tok()
    eng = HFEngine(_llama(tok), tok, batch_size=6)
    monkeypatch.setattr(rollout, "MAX_STACKED_BYTES", 4 * StackedModel(eng.model).model_bytes)
    jobs = _jobs(tok, _checkpoints(eng.model, tmp_path, 3))  # 1 + 2 + 2 engine batches of up to 6 rows
    decodes = []
    decode = eng._decode
    monkeypatch.setattr(
        eng, "_decode", lambda model, batches, p: (decodes.append(len(batches)), decode(model, batches, p))[1]
    )
    got = eng.generate_many(jobs)
    assert decodes == [2, 2, 1]
    want = _swapped(eng, jobs)
    assert [[g.token_ids for g in x] for x in got] == [[g.token_ids for g in x] for x in want]
