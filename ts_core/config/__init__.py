"""Typed run configuration: one pydantic model per section, loaded from YAML presets.

A run is configured by three layers, applied in order:
  1. a run preset            `data/presets/<preset>.yaml`        (model, task, budget)
  2. an algorithm overlay    `data/presets/algorithms/<name>.yaml` (docs/algorithm.md §4: grpo, thinking_seeds, ...)
  3. dotted overrides        `--set prefix.ratio_max=0.5`
The algorithm is read after the overrides, so `--set algorithm=grpo` picks the grpo overlay; the
overrides are applied again on top of it so they always win.

Every field has a help text (shown by `ts config keys`) and a validated range; a mistake is
reported with the dotted key, the value and what is allowed.

This package is the public face: import from `thinking_seeds.config`. Inside it,
    sections.py    the section models of the inputs (model, data, pool, prefix, reward, ...); the iteration
                   loop's in sections_loop.py, the update's in sections_update.py, their strict base in
                   section_base.py
    run_config.py  RunConfig: the sections together, the checks across them, config_hash()
    loading.py     presets, overlays, overrides, YAML in and out, ConfigError and its messages
    placement.py   where each role computes: the engine's and the trainer ranks' GPUs, Ray workers'
                   reservations, a comparison job's CUDA_VISIBLE_DEVICES (pure; refusals in one line)
    reference.py   writes docs/configuration.md from the models
"""

from thinking_seeds.algorithms import ALGORITHMS, AlgorithmName  # the one list of methods
from thinking_seeds.config.loading import (
    EXTENSION_FILE,
    ConfigError,
    available_presets,
    config_from_dict,
    load_config,
    load_saved_config,
    parse_overrides,
    save_config,
)
from thinking_seeds.config.run_config import DEVICE_RE, RunConfig
from thinking_seeds.config.sections import (
    AdvantageConfig,
    CheckpointConfig,
    ClusterConfig,
    DataConfig,
    EvalConfig,
    LoraSettings,
    LossConfig,
    ModelConfig,
    PipelineConfig,
    PoolConfig,
    PrefixConfig,
    ReasoningGymTask,
    RewardConfig,
    RolloutConfig,
    UpdateConfig,
)

__all__ = [
    "ALGORITHMS",
    "DEVICE_RE",
    "EXTENSION_FILE",
    "AdvantageConfig",
    "AlgorithmName",
    "CheckpointConfig",
    "ClusterConfig",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "LoraSettings",
    "LossConfig",
    "ModelConfig",
    "PipelineConfig",
    "PoolConfig",
    "PrefixConfig",
    "ReasoningGymTask",
    "RewardConfig",
    "RolloutConfig",
    "RunConfig",
    "UpdateConfig",
    "available_presets",
    "config_from_dict",
    "load_config",
    "load_saved_config",
    "parse_overrides",
    "save_config",
]
