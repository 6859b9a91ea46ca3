"""The learning-rate multiplier shared by the SFT warm-up (train/sft.py: sft_optimizer, through LambdaLR) and the
RL update's `update.lr_warmup_steps` (train/update_loop.py, from AdamW's own step counter)."""

from __future__ import annotations

import math

__all__ = ["lr_factor"]


def lr_factor(step: int, warmup_steps: int, total_steps: int | None = None, min_factor: float = 0.1) -> float:
    """Learning-rate multiplier at optimizer step `step` (0-based): a linear ramp over `warmup_steps`,
    then constant (total_steps None) or a cosine decay to `min_factor` at `total_steps`."""
    warm = max(1, warmup_steps)
    if step < warm or total_steps is None:
        return min(1.0, (step + 1) / warm)
    progress = min(1.0, (step - warm) / max(1, total_steps - warm))
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))
