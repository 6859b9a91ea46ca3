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


def test_loads_in_two_threads_keep_the_tied_head(monkeypatch):
    """transformers' from_pretrained swaps PreTrainedModel.tie_weights out while it loads; two loads
    at once in two threads (overlap's seeds-ahead thread next to the update) could leave it swapped
    out for good, and every later load had lm_head on the meta device (CI, kill -9 resume with
    overlap). Loads are one at a time: the wrapper below holds each load open long enough that two
    unlocked ones would overlap."""
    import threading
    import time

    from transformers import AutoModelForCausalLM

    original = AutoModelForCausalLM.from_pretrained
    active, most = [0], [0]
    guard = threading.Lock()

    def slow_load(*args, **kwargs):
        with guard:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            time.sleep(0.2)
            return original(*args, **kwargs)
        finally:
            with guard:
                active[0] -= 1

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", slow_load)
    start, models, errors = threading.Barrier(2), [], []

    def load_twice():
        start.wait()
        for _ in range(2):
            try:
                models.append(load_model("builtin:tiny", device="cpu")[0])
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                errors.append(repr(e))

    threads = [threading.Thread(target=load_twice) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and most[0] == 1
    monkeypatch.undo()
    models.append(load_model("builtin:tiny")[0])  # a load after them still ties the head
    for m in models:
        assert m.lm_head.weight.device.type == "cpu"
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
