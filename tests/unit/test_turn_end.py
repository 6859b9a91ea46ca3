"""Where the model's turn ends (engine/turn_end.py): both engines stop at any id of generation_config's
eos_token_id list; a base model without a chat template loads and its prompts are written plainly."""

from __future__ import annotations

import json

import pytest
import torch

from thinking_seeds.engine.models import char_tokenizer, encode_prompt, load_model, tiny_llama
from thinking_seeds.engine.rollout import HFEngine, SamplingParams
from thinking_seeds.engine.turn_end import eos_ids, plain_prompt

SAMPLE = SamplingParams(max_new_tokens=12, seed=1)  # the same seed: the same tokens up to a stop (seed 1: no EOS in 12)


@pytest.fixture
def saved(tmp_path):
    """A tiny Llama saved as a checkpoint directory, and its tokenizer."""
    tok = char_tokenizer("0123456789+-=ab\n")
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    return tmp_path / "m", tok


def test_generation_stops_at_the_second_eos_id_of_generation_config(saved):
    path, tok = saved
    model, tok = load_model(path)
    ctx = [tok("1+2=")["input_ids"]]
    plain = HFEngine(model, tok).generate(ctx, SAMPLE)[0]
    assert len(plain.token_ids) == 12 and tok.eos_token_id not in plain.token_ids  # runs to the cap
    k = next(i for i, t in enumerate(plain.token_ids) if i > 0 and t not in plain.token_ids[:i])
    second = plain.token_ids[k]  # the instruct model's own end of turn, say: first sampled at k
    gen_cfg = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**gen_cfg, "eos_token_id": [tok.eos_token_id, second]}))
    model, tok = load_model(path)
    got = HFEngine(model, tok).generate(ctx, SAMPLE)[0]
    assert got.token_ids == plain.token_ids[: k + 1] and got.finished
    # The vLLM engine reads the same files through the same function.
    assert eos_ids(json.loads((path / "generation_config.json").read_text()), {}) == tuple(
        sorted([tok.eos_token_id, second])
    )


def test_eos_ids_take_generation_config_then_config_and_the_tokenizer():
    assert eos_ids({"eos_token_id": [128001, 128009]}, {"eos_token_id": 128001}, 128001) == (128001, 128009)
    assert eos_ids({}, {"eos_token_id": 7}, 3) == (3, 7)
    assert eos_ids({"eos_token_id": None}, {"eos_token_id": [5, 2]}) == (2, 5)
    assert eos_ids({}, {}) == ()


def test_a_base_model_without_a_chat_template_runs_with_a_plain_prompt(saved, caplog):
    path, _ = saved
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    (path / "chat_template.jinja").unlink(missing_ok=True)
    model, tok = load_model(path)  # was: refused ("the tokenizer has no chat template")
    assert tok.chat_template is None
    chat = [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+2="}]
    assert plain_prompt(chat) == "Add.\n\nUser: 1+2=\n\nAssistant:"
    with caplog.at_level("WARNING", logger="thinking_seeds.engine.turn_end"):
        ids = encode_prompt(tok, chat)
        assert encode_prompt(tok, chat) == ids
    assert ids == tok(plain_prompt(chat))["input_ids"]
    assert len([r for r in caplog.records if "no chat template" in r.getMessage()]) == 1
    gens = HFEngine(model, tok).generate([ids], SamplingParams(max_new_tokens=4, seed=0))
    assert len(gens[0].token_ids) >= 1 and torch.isfinite(torch.tensor(gens[0].logprobs)).all()
