"""No silent truncation: a request whose context + cap exceeds the engine's length is refused in one
line (HF engine: the model's max_position_embeddings), and one that fits is sampled in full."""

import pytest

from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.engine.rollout import ContextTooLong, HFEngine, SamplingParams, refuse_overlong


@pytest.fixture(scope="module")
def engine():
    tok = char_tokenizer("0123456789+-=ab\n")
    model = tiny_llama(
        len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64, max_positions=40
    )
    return HFEngine(model, tok), tok


def test_hf_engine_refuses_a_context_and_budget_past_the_model_length(engine):
    eng, tok = engine
    ctx = [tok("1+2=")["input_ids"], tok("1" * 30)["input_ids"]]  # 4 and 30 tokens
    with pytest.raises(ContextTooLong) as e:
        eng.generate(ctx, SamplingParams(max_new_tokens=12, seed=0))  # 30 + 12 = 42 > 40
    msg = str(e.value)
    assert "\n" not in msg and "request 1" in msg and "42" in msg and "max_position_embeddings" in msg
    # A cap that fits (30 + 10 = 40) samples; a row whose cap is 0 asks for no position at all.
    gens = eng.generate(ctx, SamplingParams(max_new_tokens=12, seed=0), max_new=[12, 10])
    assert len(gens) == 2
    assert eng.generate([tok("1" * 39)["input_ids"]], SamplingParams(max_new_tokens=5), max_new=[0])[0].token_ids == []


def test_refuse_overlong_counts_only_sampling_requests():
    refuse_overlong([[1] * 10, [1] * 50], [6, 0], 16, "fix")  # 16 fits exactly; the 50-token row samples nothing
    refuse_overlong([[1] * 99], [99], None, "fix")  # no known limit: nothing to check
    with pytest.raises(ContextTooLong, match="17 positions, more than the engine's 16: set x"):
        refuse_overlong([[1] * 10], [7], 16, "set x")
