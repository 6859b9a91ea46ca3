"""The chunked LM head (engine/token_scores.py) under peft, alone and inside DDP: the head is found in
peft's base model, no (tokens x vocabulary) tensor is made, the gradient of the adapters is the plain
path's; a LoRA on the head itself falls back to the full logits and says so once. In tests/e2e only
because importing peft takes ~10 s on a loaded machine; DDP alone: unit/test_token_scores.py."""

from __future__ import annotations

import pytest

from tests.unit.test_micro_batches import tiny_model
from tests.unit.test_token_scores import (  # noqa: F401 (one_rank_group: a fixture)
    assert_ddp_gradient_is_plain,
    assert_no_vocabulary_tensor,
    one_rank_group,
    vocab_model,
)
from thinking_seeds.engine.token_scores import supports_head_scores


def _lora(model, targets):
    from peft import LoraConfig, get_peft_model

    # init_lora_weights=False: non-zero adapters, so their gradients and outputs are not trivially zero
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False))


@pytest.mark.usefixtures("one_rank_group")
def test_the_head_is_found_under_peft_and_ddp_around_peft():
    from torch.nn.parallel import DistributedDataParallel as DDP

    assert_no_vocabulary_tensor(_lora(vocab_model(), ["q_proj", "v_proj"]))
    assert_no_vocabulary_tensor(DDP(_lora(vocab_model(), ["q_proj", "v_proj"])))
    assert_ddp_gradient_is_plain(_lora(tiny_model(), ["q_proj", "v_proj"]))


def test_a_head_it_cannot_stand_in_for_is_logged_once(caplog):
    model = _lora(tiny_model(), ["q_proj", "lm_head"])  # the head is peft's LoRA Linear, not nn.Linear
    with caplog.at_level("WARNING", logger="thinking_seeds.engine.token_scores"):
        assert not supports_head_scores(model) and not supports_head_scores(model)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "PeftModel around Qwen2ForCausalLM" in lines[0], lines
    assert "peft.tuners.lora.layer.Linear" in lines[0] and "full-logits path" in lines[0]
