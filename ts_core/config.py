"""Typed run configuration: one pydantic model per section, loaded from YAML presets.

A run is configured by three layers, applied in order:
  1. a run preset            `data/presets/<preset>.yaml`        (model, task, budget)
  2. an algorithm overlay    `data/presets/algorithms/<name>.yaml` (SPEC §4: grpo, thinking_seeds, ...)
  3. dotted overrides        `--set prefix.ratio_max=0.5`
The algorithm is read after the overrides, so `--set algorithm=grpo` picks the grpo overlay; the
overrides are applied again on top of it so they always win.

Every field has a help text (shown by `ts config --help-keys`) and a validated range; a mistake is
reported with the dotted key, the value and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from thinking_seeds.algorithms import ALGORITHMS, AlgorithmName  # the one list of methods (re-exported)
from thinking_seeds.assets import PRESETS_DIR  # package data: data/presets in a checkout


class ConfigError(ValueError):
    """A configuration mistake, with the dotted key and how to fix it in the message."""


class _Section(BaseModel):
    # Unknown keys are errors: a typo like `prefix.ratio_mx` must not be silently ignored. Strict
    # types: a value is never coerced into another type, so `iterations=2.5` or `2.0`, a bool for
    # a number, a number or 'yes_please' for a bool and a quoted "3" are refused, not guessed at
    # (a float key still takes an int: `update.lr=1` is 1.0).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


class LoraSettings(_Section):
    r: int = Field(8, ge=1, le=1024, description="LoRA rank.")
    alpha: float = Field(16.0, gt=0.0, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Module names that get adapters (Llama/Qwen2 attention projections by default).")


class ModelConfig(_Section):
    path: str = Field("builtin:tiny", description="Local HF checkpoint dir, or builtin:tiny / builtin:smollm2.")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Weights dtype for rollout and update.")
    lora: LoraSettings | None = Field(
        None, description="Train LoRA adapters (peft) instead of all weights: policy steps and pool snapshots then "
        "hold only the adapter (megabytes); the engine samples from base + adapter merged.")


class RewardConfig(_Section):
    backend: Literal["math_verify", "reasoning_gym", "custom"] = Field(
        "math_verify", description="Verifier: math-verify on the \\boxed{} answer, reasoning-gym's checker of each "
        "row's data set, or the user's function (reward.fn; setting fn selects custom).")
    fn: str | None = Field(None, description="custom: package.module:function, called as fn(data_source, solution_str, "
                           "ground_truth, extra_info) -> float | {'score': float} | None (verl's custom reward).")
    partial_credit: bool = Field(
        True, description="reasoning_gym: use the checker's partial credit as the reward (countdown gives 0.05 for the "
        "right numbers with the wrong value); false: 1 for a full score, else 0.")
    timeout_s: float = Field(5.0, gt=0.0, le=600.0, description="Per-response time limit; a slower one is 'timeout'.")

    @model_validator(mode="before")
    @classmethod
    def _fn_means_custom(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("fn") and "backend" not in data:
            data = {**data, "backend": "custom"}
        return data

    @model_validator(mode="after")
    def _fn(self) -> "RewardConfig":
        if self.backend == "custom":
            if not self.fn:
                raise ValueError("reward.backend=custom needs reward.fn=package.module:function")
            from thinking_seeds.plugins import load_reward_fn  # imports the user's module: a typo fails here, before any work

            load_reward_fn(self.fn)
        elif self.fn:
            raise ValueError(f"reward.fn is for reward.backend=custom, not {self.backend}")
        return self


class ReasoningGymTask(_Section):
    name: str = Field(..., description="A reasoning-gym data set name (reasoning_gym.factory.DATASETS), e.g. countdown.")
    weight: float = Field(1.0, gt=0.0, description="Share of the mixture (relative to the other tasks' weights).")
    config: dict[str, Any] = Field(default_factory=dict, description="The data set's own config (e.g. min_numbers).")


class DataConfig(_Section):
    source: Literal["chain_sum", "countdown", "reasoning_gym", "parquet"] = Field(
        "chain_sum", description="Built-in task (chain_sum: the fast demo; countdown: +/- countdown, many solutions per "
        "prompt), any reasoning-gym data set or mixture by name (data.tasks), or a user's verl Parquet.")
    tasks: list[ReasoningGymTask] = Field(
        default_factory=list, description="source=reasoning_gym: the data sets of the mixture, each {name, weight, config}.")
    train_path: str | None = Field(None, description="verl-schema Parquet for training prompts (source=parquet).")
    val_path: str | None = Field(None, description="verl-schema Parquet for held-out evaluation (source=parquet).")
    train_size: int = Field(2000, ge=1, description="Training prompts generated for the built-in task.")
    val_size: int = Field(128, ge=1, description="Held-out validation prompts.")
    test_size: int = Field(256, ge=1, description="Held-out test prompts.")
    min_terms: int = Field(3, ge=2, le=10, description="chain_sum: fewest terms per expression.")
    max_terms: int = Field(5, ge=2, le=10, description="chain_sum: most terms per expression.")
    min_digits: int = Field(1, ge=1, le=6, description="chain_sum: fewest digits per term.")
    max_digits: int = Field(2, ge=1, le=6, description="chain_sum: most digits per term.")
    seed: int = Field(1234, description="Seed of the data set generator (fixed: splits are reproducible).")

    @model_validator(mode="after")
    def _ranges(self) -> "DataConfig":
        if self.min_terms > self.max_terms:
            raise ValueError(f"data.min_terms={self.min_terms} must be <= data.max_terms={self.max_terms}")
        if self.min_digits > self.max_digits:
            raise ValueError(f"data.min_digits={self.min_digits} must be <= data.max_digits={self.max_digits}")
        if self.source == "parquet" and not (self.train_path and self.val_path):
            raise ValueError("data.source=parquet needs data.train_path and data.val_path")
        if self.source == "reasoning_gym":
            if not self.tasks:
                raise ValueError("data.source=reasoning_gym needs data.tasks, e.g. "
                                 "--set 'data.tasks=[{name: countdown}, {name: basic_arithmetic, weight: 2}]'")
            from thinking_seeds.plugins import check_task_names  # imports reasoning-gym: only for this source

            names = [t.name for t in self.tasks]
            if len(set(names)) != len(names):
                raise ValueError(f"data.tasks names a data set twice: {names}")
            check_task_names(names)
        elif self.tasks:
            raise ValueError(f"data.tasks is for data.source=reasoning_gym, not {self.source}")
        return self


class PoolConfig(_Section):
    size: int = Field(4, ge=1, le=1000, description="Historical snapshots kept in the pool H.")
    include_initial: bool = Field(True, description="Keep the initial model (step 0) in H forever.")
    pick: Literal["uniform", "recent", "oldest"] = Field("uniform", description="How a seed's source checkpoint is drawn from H.")
    snapshot_every: int = Field(1, ge=1, description="Save the policy into H every this many iterations.")


class PrefixConfig(_Section):
    ratio_min: float = Field(0.2, ge=0.0, le=1.0, description="Lower end of the prefix fraction λ ~ U[min, max].")
    ratio_max: float = Field(0.6, ge=0.0, le=1.0, description="Upper end of the prefix fraction λ.")
    cut: Literal["token", "line"] = Field("token", description="Cut the draft at a token, or back to the last step boundary.")
    loss: Literal["clip", "shaped", "capped", "context"] = Field(
        "clip", description="Loss on prefix tokens (SPEC §3). Default `clip`: it had the best test accuracy at every seed "
        "and the largest strategy diversity on average in docs/results/ablation-loss.")
    shaped_gamma: float = Field(0.1, gt=0.0, description="LUFFY policy shaping f(p)=p/(p+γ).")
    cap: float = Field(2.0, gt=0.0, description="`capped`: truncate the prefix importance weight at this value.")
    source: Literal["historical", "dataset"] = Field("historical", description="Who writes prefixes: pool checkpoints, or the data set's solutions (luffy).")
    reuse: bool = Field(False, description="Draw stored seeds for (prompt, checkpoint) from the corpus instead of regenerating.")
    filter: Literal["none", "correct_draft"] = Field(
        "none", description="correct_draft: keep only seeds whose whole draft was correct (PrefixRL's choice); a seed "
        "whose draft was wrong is replaced by an on-policy sample, so the group keeps its size.")

    @model_validator(mode="after")
    def _ranges(self) -> "PrefixConfig":
        if self.ratio_min > self.ratio_max:
            raise ValueError(f"prefix.ratio_min={self.ratio_min} must be <= prefix.ratio_max={self.ratio_max}")
        return self


class RolloutConfig(_Section):
    engine: Literal["hf", "vllm"] = Field("hf", description="Generation engine.")
    prompts_per_iteration: int = Field(16, ge=1, description="Prompts drawn per iteration.")
    group_size: int = Field(8, ge=1, description="Samples per prompt (seeded + on-policy).")
    seeds_per_group: int = Field(4, ge=0, description="How many of the group's samples start from a historical seed.")
    temperature: float = Field(1.0, gt=0.0, le=5.0, description="Sampling temperature (also used for training log-probs).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(96, ge=1, description="Longest response (prefix + continuation), in tokens.")
    batch_size: int = Field(128, ge=1, description="Sequences generated together.")
    continuations_per_seed: int = Field(
        1, ge=1, description="Continue each seed this many times (seeds_per_group counts the seeded samples, so "
        "seeds_per_group / continuations_per_seed drafts are written per prompt); >1 lets advantage.baseline=same_seed "
        "judge a continuation against other continuations of the same seed.")

    @model_validator(mode="after")
    def _seeds(self) -> "RolloutConfig":
        if self.seeds_per_group > self.group_size:
            raise ValueError(
                f"rollout.seeds_per_group={self.seeds_per_group} must be in [0, rollout.group_size={self.group_size}]"
            )
        if self.seeds_per_group % self.continuations_per_seed:
            raise ValueError(f"rollout.seeds_per_group={self.seeds_per_group} must be a multiple of "
                             f"rollout.continuations_per_seed={self.continuations_per_seed}")
        return self


class AdvantageConfig(_Section):
    estimator: Literal["grpo", "dr_grpo", "rloo"] = Field("grpo", description="Group-relative advantage estimator.")
    baseline: Literal["group", "on_policy", "same_seed"] = Field(
        "group", description="Whose rewards form a sample's baseline: the whole group; on-policy samples only (LUFFY's "
        "split); or same_seed: a seeded sample only against the other continuations of its own seed, an on-policy "
        "sample against the on-policy samples (needs rollout.continuations_per_seed >= 2).")


class LossConfig(_Section):
    clip_ratio_low: float = Field(0.2, ge=0.0, lt=1.0, description="PPO ε_low.")
    clip_ratio_high: float = Field(0.28, ge=0.0, description="PPO ε_high (clip-higher).")
    clip_ratio_c: float | None = Field(None, gt=1.0, description="Dual-clip constant c for negative advantages (None: off).")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How token losses become one number (verl names)."
    )
    entropy_coeff: float = Field(0.0, ge=0.0, description="Entropy bonus weight.")
    kl_coef: float = Field(0.0, ge=0.0, description="KL-to-reference penalty weight (reference = initial model).")
    kl_type: Literal["k1", "k3"] = Field("k3", description="KL estimator.")


class UpdateConfig(_Section):
    lr: float = Field(1e-4, gt=0.0, lt=1.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    grad_clip: float = Field(1.0, gt=0.0, description="Max global grad norm.")
    epochs: int = Field(1, ge=1, description="Passes over the iteration's rollouts.")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per pass (the batch split in this many parts).")
    micro_batch_size: int = Field(64, ge=1, description="Sequences per forward/backward (gradient accumulation).")
    mixed_precision: Literal["no", "bf16"] = Field(
        "no", description="bf16: the update's forward runs under bf16 autocast (in process: torch.autocast; accelerate "
        "launcher: --mixed_precision bf16) with fp32 master weights and fp32 AdamW state (needs model.dtype=float32), "
        "and the engine generates with bf16 weights; no: everything in model.dtype.")
    recompute_old_logprobs: bool | None = Field(
        None, description="Recompute π_old with the trainer's own forward (same precision, same micro-batches as the "
        "first optimizer step) instead of trusting the engine's log-probs. Unset: on exactly when engine and trainer "
        "numerics differ (model.dtype=bfloat16 or update.mixed_precision=bf16), so on-policy ratios stay exactly 1; "
        "false is refused then. Set true for vLLM in float32 if its parity matters to you.")
    launcher: Literal["in_process", "accelerate"] = Field("in_process", description="Run the update in this process or via `accelerate launch`.")
    num_processes: int = Field(1, ge=1, description="Processes for the accelerate launcher.")

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _no_is_text(cls, v: Any) -> Any:
        return "no" if v is False else v  # YAML 1.1 reads a bare `no` (accelerate's word) as false

    @field_validator("betas", mode="before")
    @classmethod
    def _betas_from_yaml(cls, v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v  # YAML (and config.yaml) has lists, not tuples


class CheckpointConfig(_Section):
    keep_last: int | None = Field(
        None, ge=1, description="Keep only the last N policy steps (plus θ_0 and keep_every); None keeps all. The "
        "historical pool's snapshots are separate and always kept.")
    keep_every: int | None = Field(None, ge=1, description="With keep_last: also keep every N-th policy step.")


class EvalConfig(_Section):
    every: int = Field(5, ge=1, description="Evaluate every this many iterations (and at the end).")
    prompts: int = Field(64, ge=1, description="Held-out prompts per evaluation.")
    samples: int = Field(16, ge=1, description="Samples per prompt (pass@k for k up to this).")
    temperature: float = Field(1.0, gt=0.0, description="Evaluation sampling temperature.")
    split: Literal["validation", "test"] = Field("validation", description="Held-out split.")
    test_samples: int = Field(16, ge=1, description="Samples per prompt of a comparison's final evaluation on the whole "
                              "test split (pass@k for k up to this).")
    seeded: bool = Field(True, description="At the final evaluation, also sample continuations of historical seeds (λ ~ U[prefix.ratio_min, ratio_max], or U[0.2, 0.6] for whole-trajectory and on-policy methods) for the explorable-space pass@k.")


DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:[0-9]+)$")
# Keys left out of config_hash: `device` says where a run computes, not what (a run started on a CPU
# may resume on a GPU), and keys added after runs existed hash only when set away from their default,
# so those runs' stages stay complete.
_HASH_ALWAYS_OUT = (("device",),)
_HASH_OUT_AT_DEFAULT = {("update", "mixed_precision"): "no"}

class RunConfig(_Section):
    algorithm: AlgorithmName = Field(
        "thinking_seeds", description="Method preset (SPEC §4)."
    )
    iterations: int = Field(10, ge=1, description="Training iterations.")
    seed: int = Field(0, description="Seed for sampling and data order.")
    device: str = Field(
        "auto", description="Where the engine and the trainer run: auto (the first CUDA GPU when torch sees one, else "
        "the CPU), cpu, cuda or cuda:N. Checkpoints are always written from CPU copies, so a run resumes on any device.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="How responses are scored (a backend "
                                 "name alone, e.g. reward=reasoning_gym, is short for {backend: reasoning_gym}).")
    logger: list[Literal["console", "tensorboard", "mlflow", "wandb"]] = Field(
        default_factory=lambda: ["console"], description="Experiment trackers (verl's trainer.logger): every metric and "
        "the config; mlflow to <run>/mlruns and wandb offline unless MLFLOW_TRACKING_URI / WANDB_MODE say otherwise.")
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    pool: PoolConfig = PoolConfig()
    prefix: PrefixConfig = PrefixConfig()
    rollout: RolloutConfig = RolloutConfig()
    advantage: AdvantageConfig = AdvantageConfig()
    loss: LossConfig = LossConfig()
    update: UpdateConfig = UpdateConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    eval: EvalConfig = EvalConfig()

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_shorthand(cls, v: Any) -> Any:
        return {"backend": v} if isinstance(v, str) else v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_RE.match(v):
            raise ValueError("must be auto, cpu, cuda or cuda:N (e.g. cuda:1)")
        return v

    @model_validator(mode="after")
    def _precision_consistent(self) -> "RunConfig":
        u = self.update
        if u.mixed_precision == "bf16" and self.model.dtype != "float32":
            raise ValueError("update.mixed_precision=bf16 keeps fp32 master weights: set model.dtype=float32 "
                             f"(got {self.model.dtype}; model.dtype=bfloat16 trains bf16 weights without mixed precision)")
        if u.recompute_old_logprobs is None:  # automatic: resolved here, so config.yaml records the choice
            u.recompute_old_logprobs = self.precision_differs
        elif not u.recompute_old_logprobs and self.precision_differs:
            raise ValueError(f"update.recompute_old_logprobs=false with {self._precision_text()}: the engine's bf16 "
                             "log-probs are not the trainer's, so on-policy ratios would not be 1; leave it unset or true")
        return self

    @property
    def engine_dtype(self) -> str:
        """The engine's weights dtype: bf16 generation whenever bf16 is in play, else model.dtype."""
        return "bfloat16" if self.precision_differs else self.model.dtype

    @property
    def precision_differs(self) -> bool:
        """Whether the engine's numerics differ from the trainer's (bf16 anywhere: rounding differs between a
        KV-cached decode and the trainer's full forward, or between bf16 weights and fp32 masters under autocast)."""
        return self.model.dtype == "bfloat16" or self.update.mixed_precision == "bf16"

    def _precision_text(self) -> str:
        return "update.mixed_precision=bf16" if self.update.mixed_precision == "bf16" else f"model.dtype={self.model.dtype}"

    @model_validator(mode="after")
    def _algorithm_consistent(self) -> "RunConfig":
        # The presets set these; an override that contradicts the method would silently run
        # another method under this one's name.
        seeds = self.rollout.seeds_per_group
        if self.algorithm in ("grpo", "dr_grpo") and seeds != 0:
            raise ValueError(f"algorithm={self.algorithm} is on-policy: rollout.seeds_per_group must be 0, got {seeds}")
        if self.algorithm not in ("grpo", "dr_grpo") and seeds == 0:
            raise ValueError(f"algorithm={self.algorithm} needs seeded samples: rollout.seeds_per_group must be in [1, {self.rollout.group_size}]")
        full = self.prefix.ratio_min == 1.0 and self.prefix.ratio_max == 1.0
        if self.algorithm in ("seq_mix", "luffy") and not full:
            raise ValueError(f"algorithm={self.algorithm} mixes whole trajectories: prefix.ratio_min and ratio_max must be 1.0")
        if self.algorithm in ("thinking_seeds", "prefix_context") and self.prefix.ratio_max >= 1.0:
            raise ValueError(f"algorithm={self.algorithm} continues a prefix: prefix.ratio_max must be < 1.0 (use seq_mix for whole trajectories)")
        if self.prefix.source == "dataset" and self.algorithm != "luffy":
            raise ValueError("prefix.source=dataset is LUFFY's guidance: use algorithm=luffy")
        from thinking_seeds.plugins import check_loggers  # a tracker whose package is missing fails here, before any work

        check_loggers(self.logger)
        if self.data.source in ("reasoning_gym", "countdown") and self.reward.backend == "math_verify":
            raise ValueError(f"data.source={self.data.source} is scored by reasoning-gym's own checkers: set "
                             "reward=reasoning_gym (or your own reward.fn)")
        if self.advantage.baseline == "same_seed" and seeds and self.rollout.continuations_per_seed < 2:
            raise ValueError("advantage.baseline=same_seed compares continuations of one seed: set "
                             "rollout.continuations_per_seed >= 2")
        if self.pool.size < 1 and not self.pool.include_initial and seeds > 0:
            raise ValueError("pool is empty: set pool.size >= 1 or pool.include_initial=true")
        return self

    @property
    def seeded(self) -> bool:
        """Whether iterations draw samples that start from someone else's tokens."""
        return self.rollout.seeds_per_group > 0

    def config_hash(self) -> str:
        """Stable hash of every setting that changes what is computed: part of each stage's cache key."""
        data = self.model_dump(mode="json")
        for path in _HASH_ALWAYS_OUT:
            _drop(data, path)
        for path, default in _HASH_OUT_AT_DEFAULT.items():
            if _get(data, path) == default:
                _drop(data, path)
        blob = json.dumps(data, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _get(data: dict, path: tuple[str, ...]) -> Any:
    for part in path:
        data = data.get(part, {}) if isinstance(data, dict) else {}
    return data


def _drop(data: dict, path: tuple[str, ...]) -> None:
    for part in path[:-1]:
        data = data.get(part, {})
    data.pop(path[-1], None)


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus YAML 1.2's floats that YAML 1.1 reads as strings: `1e-4`, `3E5`,
    `1.0e4` (no dot or no exponent sign) are numbers, as a user means them -- with strict config
    types a string would be refused for a float key."""


class _YamlDumper(yaml.SafeDumper):
    """The same resolver when writing: a string such as '1e5' is quoted, so it reads back as text."""


for _cls in (_YamlLoader, _YamlDumper):
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a SafeLoader subclass


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = _load_yaml(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of config sections, got {type(data).__name__}")
    return data


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def _preset_path(preset: str) -> Path:
    p = Path(preset)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    path = PRESETS_DIR / f"{preset}.yaml"
    if not path.exists():
        raise ConfigError(
            f"unknown preset {preset!r}: no file {path}. Known presets: {', '.join(available_presets())} "
            "(or pass a path to a YAML file)"
        )
    return path


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """`["prefix.ratio_max=0.5", "algorithm=grpo"]` -> nested dict; values parsed as YAML scalars."""
    nested: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value (e.g. prefix.ratio_max=0.5)")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} has an empty key")
        value = _load_yaml(raw) if raw.strip() else None
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is set twice, once as a value")
        node[parts[-1]] = value
    return nested


def _explain(err: ValidationError, origin: str) -> ConfigError:
    lines = []
    for e in err.errors():
        key = ".".join(str(x) for x in e["loc"]) or "(root)"
        if e["type"] == "extra_forbidden":
            section = _section_for(e["loc"][:-1])
            known = ", ".join(sorted(section.model_fields)) if section else "?"
            lines.append(f"unknown config key {key!r}; known keys here: {known}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            # A section-level check already names its keys and values; a field check gets both added.
            if e["type"] in _WRONG_TYPE:  # strict types: say what the key takes, and what it got
                value = e.get("input")
                lines.append(f"{key}: must be {_WRONG_TYPE[e['type']]} (got {value!r}, which is {_yaml_type(value)})")
            elif isinstance(e.get("input"), dict):
                lines.append(msg)
            else:
                lines.append(f"{key}: {msg} (got {e.get('input')!r})")
    return ConfigError(f"invalid configuration ({origin}):\n  " + "\n  ".join(lines))


# pydantic's strict type errors -> what the key allows, in the words of a YAML value.
_WRONG_TYPE = {
    "int_type": "a whole number, e.g. 3",
    "float_type": "a number, e.g. 0.5 or 1e-4",
    "bool_type": "true or false",
    "string_type": "text",
    "list_type": "a list, e.g. [a, b]",
    "tuple_type": "a list, e.g. [0.9, 0.999]",
    "dict_type": "a mapping, e.g. {key: value}",
    "model_type": "a mapping of this section's keys",
}


def _yaml_type(value: Any) -> str:
    """The kind of value the user wrote, as YAML read it (a quoted "3" is text, `true` a bool)."""
    return {bool: "a bool", int: "a whole number", float: "a number", str: "text", list: "a list",
            dict: "a mapping", type(None): "null"}.get(type(value), f"a {type(value).__name__}")


def _section_for(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] = RunConfig
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return None
        model = field.annotation
    return model


def load_config(preset: str = "tiny", overrides: list[str] | None = None) -> RunConfig:
    """Build a validated RunConfig from a preset name (or YAML path), its algorithm overlay and overrides."""
    path = _preset_path(preset)
    base = _read_yaml(path)
    over = parse_overrides(overrides or [])
    algorithm = over.get("algorithm", base.get("algorithm", RunConfig.model_fields["algorithm"].default))
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm: unknown method {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    overlay = _read_yaml(PRESETS_DIR / "algorithms" / f"{algorithm}.yaml")
    merged = _deep_merge(_deep_merge(base, overlay), over)
    merged["algorithm"] = algorithm
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as e:
        raise _explain(e, f"preset {path}, algorithm overlay {algorithm}, overrides {overrides or []}") from None


def config_from_dict(data: dict[str, Any], origin: str = "dict") -> RunConfig:
    """Validate a full config (e.g. a run directory's config.yaml) with the same error messages."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise _explain(e, origin) from None


def save_config(cfg: RunConfig, path: Path) -> None:
    path.write_text(yaml.dump(cfg.model_dump(mode="json"), Dumper=_YamlDumper, sort_keys=False))


def load_saved_config(path: Path) -> RunConfig:
    return config_from_dict(_read_yaml(path), origin=str(path))
