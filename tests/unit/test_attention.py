"""Packed rows' attention (engine/attention.py): flash-attention's variable-length kernels only where
they run (CUDA, flash-attn installed, bf16/fp16), sdpa otherwise, with the reason said once in the log.
No GPU here: the choice is checked for a CUDA device without moving the model."""

from __future__ import annotations

import importlib.util

import torch

from tests.unit.test_micro_batches import tiny_model
from thinking_seeds.engine.attention import FLASH, packed_attention, use_packed_attention

CUDA = torch.device("cuda")


def test_flash_attention_only_where_it_runs(monkeypatch):
    assert packed_attention(torch.device("cpu"), True) == ("sdpa", "not on CUDA")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    impl, why = packed_attention(CUDA, True)
    assert impl == "sdpa" and "flash-attn is not installed" in why
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "flash_attn" else real(name, *a)
    )
    assert packed_attention(CUDA, True)[0] == FLASH
    impl, why = packed_attention(CUDA, False)
    assert impl == "sdpa" and "fp32" in why and "update.mixed_precision=bf16" in why


def test_the_choice_is_logged_once_and_the_model_keeps_sdpa_on_the_cpu(caplog):
    model = tiny_model()
    before = model.config._attn_implementation
    with caplog.at_level("INFO", logger="thinking_seeds.engine.attention"):
        assert use_packed_attention(model, torch.device("cpu"), False) == "sdpa"
        use_packed_attention(model, torch.device("cpu"), False)
    assert model.config._attn_implementation == before
    assert [r.getMessage() for r in caplog.records] == ["packed rows: attention sdpa (not on CUDA)"]
