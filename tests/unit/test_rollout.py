"""HF engine and scorer: sampled log-probs match a fresh forward pass; padding, EOS, seeds, swaps."""

import pytest
import torch

from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.engine.rollout import HFEngine, SamplingParams
from thinking_seeds.engine.scoring import score_responses


@pytest.fixture(scope="module")
def tiny():
    tok = char_tokenizer("0123456789+-=ab\n")
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)
    return model, tok


def contexts(tok):
    # Different lengths, so left padding is exercised.
    return [tok("1+2=")["input_ids"], tok("34-5+6=")["input_ids"], tok("7=")["input_ids"]]


def test_engine_logprobs_match_scorer(tiny):
    model, tok = tiny
    eng = HFEngine(model, tok, batch_size=2)  # two batches: padding differs per batch
    ctx = contexts(tok) * 3
    gens = eng.generate(ctx, SamplingParams(temperature=0.7, max_new_tokens=12, seed=3))
    with torch.no_grad():
        sc = score_responses(model, ctx, [g.token_ids for g in gens], pad_id=tok.pad_token_id, temperature=0.7)
    for i, g in enumerate(gens):
        assert len(g.token_ids) == len(g.logprobs) >= 1
        assert torch.allclose(sc.logprobs[i, : len(g.token_ids)], torch.tensor(g.logprobs), atol=1e-5)
        assert sc.mask[i].sum().item() == len(g.token_ids)


def test_eos_stops_and_seed_is_deterministic(tiny):
    model, tok = tiny
    eng = HFEngine(model, tok)
    p = SamplingParams(max_new_tokens=20, seed=11)
    a = eng.generate(contexts(tok), p)
    b = eng.generate(contexts(tok), p)
    c = eng.generate(contexts(tok), SamplingParams(max_new_tokens=20, seed=12))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    for g in a:
        assert tok.eos_token_id not in g.token_ids[:-1]  # nothing sampled after EOS
        assert g.finished == (g.token_ids[-1] == tok.eos_token_id)
        assert len(g.token_ids) <= 20


def test_top_p_small_is_greedy(tiny):
    model, tok = tiny
    eng = HFEngine(model, tok)
    ctx = contexts(tok)
    gens = eng.generate(ctx, SamplingParams(top_p=1e-6, max_new_tokens=5, seed=0))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ctx[0]])).logits[0, -1]
    assert gens[0].token_ids[0] == int(logits.argmax())


def test_weight_swap_changes_and_restores_outputs(tiny, tmp_path):
    model, tok = tiny
    other = tiny_llama(
        len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64, seed=99
    )
    model.save_pretrained(tmp_path / "a")
    other.save_pretrained(tmp_path / "b")
    eng = HFEngine(
        tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64, seed=5),
        tok,
    )
    p = SamplingParams(max_new_tokens=10, seed=1)
    eng.load_weights(tmp_path / "a")
    first = eng.generate(contexts(tok), p)
    eng.load_weights(tmp_path / "b")
    second = eng.generate(contexts(tok), p)
    eng.load_weights(tmp_path / "a")
    again = eng.generate(contexts(tok), p)
    assert [g.logprobs for g in first] != [g.logprobs for g in second]
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.logprobs for g in first] == [g.logprobs for g in again]


def test_continuation_from_prefix_conditions_on_it(tiny):
    model, tok = tiny
    eng = HFEngine(model, tok)
    ctx = tok("1+2=")["input_ids"]
    prefix = tok("a1")["input_ids"]
    gens = eng.generate([ctx + prefix], SamplingParams(max_new_tokens=8, seed=0))
    with torch.no_grad():
        sc = score_responses(model, [ctx], [prefix + gens[0].token_ids], pad_id=tok.pad_token_id)
    assert torch.allclose(
        sc.logprobs[0, len(prefix) : len(prefix) + len(gens[0].token_ids)], torch.tensor(gens[0].logprobs), atol=1e-5
    )


def test_per_row_caps(tiny):
    model, tok = tiny
    eng = HFEngine(model, tok)
    ctx = contexts(tok)
    p = SamplingParams(max_new_tokens=20, seed=4)
    full = eng.generate(ctx, p)
    capped = eng.generate(ctx, p, max_new=[2, 20, 0])
    assert len(capped[0].token_ids) <= 2 and capped[2].token_ids == []
    # A cap truncates the same sample: the sampled tokens agree up to the cap.
    assert capped[0].token_ids == full[0].token_ids[: len(capped[0].token_ids)]
    assert capped[1].token_ids == full[1].token_ids


def test_prefill_groups_partition_rows_by_length():
    from thinking_seeds.engine.prefill import group_width, prefill_groups

    lengths = [60, 4, 61, 5, 4, 60, 6, 62] * 4
    groups = prefill_groups(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))  # every row once
    assert len(groups) == 2 and {lengths[i] for i in groups[0]} == {4, 5, 6}
    assert prefill_groups([7] * 5) == [list(range(5))]
    # A group sits a multiple of the alignment off the batch's left padding.
    assert group_width(6, 62) == 30 and group_width(62, 62) == 62 and group_width(61, 62) == 62


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("prefix_repeats", [4, 16])
def test_grouped_prefill_and_preallocated_cache_sample_the_same(tiny, monkeypatch, seed, prefix_repeats):
    """The engine's own KV cache and its prefill by groups of similar length sample what one prefill of
    the whole left-padded batch with transformers' cache samples: the same tokens, and under 192
    positions (the tiny preset's: 77) the same log-probs bit for bit; wider, equal to float rounding.
    (Finished rows are kept, as transformers' cache keeps them: shedding changes the batch's shape, and
    with it the float rounding; test_shedding_finished_rows_samples_the_same checks that on its own.)"""
    import thinking_seeds.engine.decode as decode
    from thinking_seeds.engine.prefill import prefill_groups

    monkeypatch.setattr(decode, "SHED_DONE_FRACTION", 2.0)  # never
    model, tok = tiny
    eng = HFEngine(model, tok, batch_size=64)
    short = contexts(tok)
    long_ = [c + tok("12+34-5+6=78a")["input_ids"] * prefix_repeats for c in short]  # prompt + a long prefix
    ctx = (short + long_) * 8
    assert len(prefill_groups([len(c) for c in ctx])) > 1  # the batch is prefilled in groups
    p = SamplingParams(temperature=1.0, max_new_tokens=16, seed=seed)
    caps = [16, 9, 3, 16, 0, 7] * 8
    ours = eng.generate(ctx, p, max_new=caps)
    monkeypatch.setattr(decode, "growing_cache", lambda *a: None)  # transformers' DynamicCache, one prefill
    plain = eng.generate(ctx, p, max_new=caps)
    assert [g.token_ids for g in ours] == [g.token_ids for g in plain]
    assert [g.finished for g in ours] == [g.finished for g in plain]
    if max(len(c) for c in ctx) < 192:
        assert [g.logprobs for g in ours] == [g.logprobs for g in plain]
    for g, h in zip(ours, plain, strict=True):
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(h.logprobs), atol=1e-5)


def test_shedding_finished_rows_samples_the_same(tiny, monkeypatch):
    """A batch that drops its finished rows samples the tokens one that keeps them all to the end samples,
    with log-probs equal to float rounding, and computes fewer rows: seeds' continuations (short caps)
    beside on-policy rows (the whole budget)."""
    import thinking_seeds.engine.decode as decode

    model, tok = tiny
    eng = HFEngine(model, tok, batch_size=64)
    short = contexts(tok)
    ctx = (short + [c + tok("12+34-5+6=")["input_ids"] for c in short]) * 8
    caps = [24, 24, 24, 3, 5, 9] * 8
    p = SamplingParams(temperature=1.0, max_new_tokens=24, seed=4)
    rows = []  # rows of every forward pass, prefill and decode steps
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda **k: rows.append(k["input_ids"].shape[0]) or forward(**k))
    shed = eng.generate(ctx, p, max_new=caps)
    shed_rows, rows[:] = sum(rows), []
    monkeypatch.setattr(decode, "SHED_DONE_FRACTION", 2.0)  # never
    kept = eng.generate(ctx, p, max_new=caps)
    assert [g.token_ids for g in shed] == [g.token_ids for g in kept]
    assert [g.finished for g in shed] == [g.finished for g in kept]
    for g, h in zip(shed, kept, strict=True):
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(h.logprobs), atol=1e-5)
    assert shed_rows < 0.75 * sum(rows), (shed_rows, sum(rows))


def test_a_rows_samples_do_not_depend_on_the_other_rows(tiny):
    """Row i's tokens follow from its context, its cap and the seed alone: changing the other rows' caps
    (so that they leave the batch at other steps) leaves them as they were."""
    model, tok = tiny
    eng = HFEngine(model, tok, batch_size=64)
    ctx = contexts(tok) * 10
    p = SamplingParams(temperature=1.0, max_new_tokens=20, seed=9)
    a = eng.generate(ctx, p, max_new=[20] * 30)
    b = eng.generate(ctx, p, max_new=[20 if i % 2 else 2 for i in range(30)])
    assert [g.token_ids for g in a][1::2] == [g.token_ids for g in b][1::2]
    assert [g.token_ids[:2] for g in a][::2] == [g.token_ids for g in b][::2]


def test_prefill_width_adds_no_decode_step():
    from thinking_seeds.engine.prefill import prefill_width

    assert prefill_width([4, 7, 2], [16, 16, 16]) == 7  # equal caps: the longest context, nothing forced
    # prompts of 4 and 7 tokens at cap 16, a prompt + 13-token prefix (20) at cap 3: prefill 7, force 13
    assert prefill_width([4, 7, 20], [16, 16, 3]) == 7
    assert prefill_width([4, 30], [16, 0]) == 4  # a row with nothing to sample sets no width
    assert prefill_width([20, 20], [10, 2]) == 20  # every token of the capped row's context fits the steps


def test_prefixes_fed_through_the_decode_steps_condition_the_samples(tiny):
    """Seeded rows (prompt + prefix, cap T - len(prefix)) beside on-policy rows (cap T): the batch
    prefills the prompts' width only and feeds each prefix through the first decode steps; every
    sampled token's log-prob is the one a forward pass over prompt + prefix + the sample gives."""
    from thinking_seeds.engine.prefill import prefill_width

    model, tok = tiny
    eng = HFEngine(model, tok, batch_size=64)
    prompts = contexts(tok)
    prefixes = [tok("12+3")["input_ids"], tok("4-56+7=8a9")["input_ids"], tok("1")["input_ids"]]
    T = 14
    ctx = prompts * 2 + [p + q for p, q in zip(prompts, prefixes, strict=True)] * 2
    caps = [T] * 6 + [T - len(q) for q in prefixes] * 2
    assert prefill_width([len(c) for c in ctx], caps) == max(len(p) for p in prompts)  # prefixes are forced
    params = SamplingParams(temperature=0.9, max_new_tokens=T, seed=5, feed_context=True)
    gens = eng.generate(ctx, params, max_new=caps)
    assert [g.token_ids for g in gens] == [g.token_ids for g in eng.generate(ctx, params, max_new=caps)]
    heads = prompts * 4
    tails = [[] for _ in range(6)] + [list(q) for q in prefixes] * 2
    with torch.no_grad():
        sc = score_responses(
            model,
            heads,
            [a + g.token_ids for a, g in zip(tails, gens, strict=True)],
            pad_id=tok.pad_token_id,
            temperature=0.9,
        )
    for i, (a, g, cap) in enumerate(zip(tails, gens, caps, strict=True)):
        assert 1 <= len(g.token_ids) <= cap and len(g.logprobs) == len(g.token_ids)
        assert g.finished == (g.token_ids[-1] == tok.eos_token_id) and tok.eos_token_id not in g.token_ids[:-1]
        want = sc.logprobs[i, len(a) : len(a) + len(g.token_ids)]
        assert torch.allclose(want, torch.tensor(g.logprobs), atol=1e-5), i
