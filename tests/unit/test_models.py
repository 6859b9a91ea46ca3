"""Models: the offline char tokenizer, the bundled tiny model, local-only loading, clear errors."""

import json

import pytest
import torch

from thinking_seeds.data.chain_sum import CHARSET, question, solution
from thinking_seeds.engine.models import (
    ModelError,
    builtin_model_path,
    char_tokenizer,
    count_params,
    encode_prompt,
    load_model,
    resolve_model_path,
)


def test_char_tokenizer_round_trip():
    tok = char_tokenizer(CHARSET)
    text = solution("38-57+10+60", "b")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text
    prompt = encode_prompt(tok, [{"role": "user", "content": question("1+2")}])
    assert tok.decode(prompt) == question("1+2") + "\n"


def test_bundled_tiny_model_is_a_standard_llama():
    model, tok = load_model("builtin:tiny")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 0.5e6 < count_params(model) < 1.5e6
    report = json.loads((builtin_model_path("tiny") / "warmup_report.json").read_text())
    assert report["chosen_step"] > 0 and report["in_target_band"]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([encode_prompt(tok, [{"role": "user", "content": question("1+2")}])]))
    assert out.logits.shape[-1] == len(tok)


def test_errors_say_what_to_do(tmp_path):
    with pytest.raises(ModelError, match="unknown builtin model 'nope'"):
        resolve_model_path("builtin:nope")
    with pytest.raises(ModelError, match="config.json missing"):
        resolve_model_path(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="no .safetensors weights"):
        load_model(str(tmp_path))
