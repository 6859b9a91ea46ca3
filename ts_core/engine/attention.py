"""Which attention kernels the trainer's model runs for packed rows (update.packed: one row of many
sequences, positions restarting at 0; train/packed_scoring.py).

flash-attention's variable-length kernels when flash-attn is installed, the model is on CUDA and it
computes in bf16 or fp16 (flash-attention has no fp32 kernels): transformers reads the sequences'
boundaries from the position_ids and attends within each, no mask and no work across sequences. sdpa
otherwise: the row runs with a block-diagonal (N x N) mask. The choice and its reason are said once in
the log.
"""

from __future__ import annotations

import importlib.util
import logging

import torch

FLASH = "flash_attention_2"
log = logging.getLogger(__name__)
_told: set[str] = set()


def packed_attention(device: torch.device, half: bool) -> tuple[str, str]:
    """(attn_implementation, why) for packed rows on `device`; `half`: the forward computes in bf16/fp16."""
    if device.type != "cuda":
        return "sdpa", "not on CUDA"
    if importlib.util.find_spec("flash_attn") is None:
        return "sdpa", "flash-attn is not installed (pip install flash-attn for its variable-length kernels)"
    if not half:
        return (
            "sdpa",
            "the forward runs in fp32, which flash-attention has no kernels for (update.mixed_precision=bf16)",
        )
    return FLASH, "flash-attn installed, on CUDA, bf16/fp16"


def use_packed_attention(model, device: torch.device, half: bool) -> str:
    """Set the model's attention for packed rows (`packed_attention`) and say it once; the one in use."""
    impl, why = packed_attention(device, half)
    if impl == FLASH and getattr(model.config, "_attn_implementation", None) != FLASH:
        try:
            model.set_attn_implementation(FLASH)
        except (ValueError, ImportError) as e:  # an architecture without flash-attention support in transformers
            impl, why = getattr(model.config, "_attn_implementation", "sdpa"), f"{type(model).__name__}: {e}"
    line = f"packed rows: attention {impl} ({why})"
    if line not in _told:
        _told.add(line)
        (log.info if device.type != "cuda" else log.warning if impl != FLASH else log.info)(line)
    return impl
