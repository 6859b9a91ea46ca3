"""What every section of a run configuration shares: the strict base model and the switch for checks
of what a config names outside us (sections.py, sections_loop.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationInfo

__all__ = ["CHECK_OUTSIDE", "LORA_REQUESTS_DEFAULT", "checks_outside"]


# The validation context's switch for the checks of what a config names outside us (a reward fn's module,
# reasoning-gym names, tracker packages): off in the trainer process, which trains on rollouts that are
# already scored and imports none of them (a reward module on the driver's sys.path only is no error there).
CHECK_OUTSIDE = "check_outside"


def checks_outside(info: ValidationInfo) -> bool:
    return (info.context or {}).get(CHECK_OUTSIDE, True)


class _Section(BaseModel):
    # Unknown keys are errors: a typo like `prefix.ratio_mx` must not be silently ignored. Strict
    # types: a value is never coerced into another type, so `iterations=2.5` or `2.0`, a bool for
    # a number, a number or 'yes_please' for a bool and a quoted "3" are refused, not guessed at
    # (a float key still takes an int: `update.lr=1` is 1.0).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


# rollout.lora_requests's default, chosen by bench/vllm_lora.py (BENCHMARKS.md): on the CPU backend vLLM's LoRA
# kernels are reference torch code and the one call was 2.1x slower than merged weights swapped per checkpoint
# (SmolLM2, a pool of 4). Out of the config hash at the default.
LORA_REQUESTS_DEFAULT = False
