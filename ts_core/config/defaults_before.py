"""Defaults that changed after runs had started with the old value (config/run_config.py re-exports these):
a run keeps what it started with, and its config hash."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thinking_seeds.config.run_config import RunConfig

__all__ = ["DEFAULTS_BEFORE", "defaults_before_held", "keep_defaults_before"]

# Settings whose default changed after runs had started with the old one, and that old value. A run's
# config.yaml holds every key (config/loading.py save_config), so one that lacks such a key was written
# before the field existed and means the old value (load_saved_config reads it so); `ts train` on a run
# whose config.yaml holds the old value continues with it, not with today's preset or default
# (keep_defaults_before, from pipeline/resume.py): the run keeps its config hash and computes what it
# computed. The hash leaves these keys out at their old value (run_config._HASH_OUT_AT_DEFAULT), so new runs
# that use the new default hash it.
DEFAULTS_BEFORE: dict[tuple[str, str], Any] = {
    # padded micro-batches of update.micro_batch_size sequences, until token budgets became the default
    ("update", "max_tokens_per_micro_batch"): None,
    # fp32 everywhere, until bf16 became the default on a CUDA GPU (update.mixed_precision=auto, issue #52)
    ("update", "mixed_precision"): "no",
    # whole drafts, cut at λ·|z|, until drafts stopped at their cut λ·T became the default (issue 53)
    ("prefix", "ratio_of"): "draft",
}
# Settings resolved from a DEFAULTS_BEFORE key when a config is validated: kept with it, at the run's own
# recorded value (update.recompute_old_logprobs is on exactly when bf16 is in play, unless set).
_RESOLVED_WITH: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("update", "mixed_precision"): (("update", "recompute_old_logprobs"),),
}


def keep_defaults_before(saved: RunConfig, cfg: RunConfig) -> RunConfig:
    """`cfg` with each DEFAULTS_BEFORE setting at its old value where the run's saved config holds that
    value: a run started before a default changed continues as it started, whatever the preset says now."""
    for (section, key), old in DEFAULTS_BEFORE.items():
        if getattr(getattr(saved, section), key) == old and getattr(getattr(cfg, section), key) != old:
            moves = {(section, key): old}
            moves |= {k: getattr(getattr(saved, k[0]), k[1]) for k in _RESOLVED_WITH.get((section, key), ())}
            for (sec, name), value in moves.items():
                moved = getattr(cfg, sec).model_copy(update={name: value})
                cfg = cfg.model_copy(update={sec: moved})
    return cfg


def defaults_before_held(saved: dict[str, Any]) -> list[tuple[str, str]]:
    """The DEFAULTS_BEFORE keys that a recorded config, as a dict (a run's config.yaml, a registered
    protocol's resolved config), holds at their old value or lacks: a record written before the key
    existed meant the old value, as load_saved_config reads it."""
    held = []
    for (section, key), old in DEFAULTS_BEFORE.items():
        part = saved.get(section)
        if not isinstance(part, dict) or part.get(key, old) == old:
            held.append((section, key))
    return held
