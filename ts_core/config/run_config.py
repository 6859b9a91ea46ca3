"""RunConfig: the whole run configuration, the checks across its sections, and its hash."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from thinking_seeds.algorithms import AlgorithmName
from thinking_seeds.config.defaults_before import DEFAULTS_BEFORE, defaults_before_held, keep_defaults_before
from thinking_seeds.config.sections import (
    LORA_REQUESTS_DEFAULT,
    AdvantageConfig,
    CheckpointConfig,
    ClusterConfig,
    DataConfig,
    EvalConfig,
    LossConfig,
    ModelConfig,
    PipelineConfig,
    PoolConfig,
    PrefixConfig,
    RewardConfig,
    RolloutConfig,
    UpdateConfig,
    _Section,
    checks_outside,
)

__all__ = ["DEFAULTS_BEFORE", "DEVICE_RE", "RunConfig", "defaults_before_held", "keep_defaults_before"]

DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:[0-9]+)$")
# Keys left out of config_hash: `device` says where a run computes, not what (a run started on a CPU
# may resume on a GPU), and keys added after runs existed hash only when set away from their default,
# so those runs' stages stay complete.
# Where generation and verification run (cluster, worker counts) is not what they compute either: the
# shards and their seeds depend on rollout.batch_size only, so a run resumes on a Ray cluster or off it.
_HASH_ALWAYS_OUT = (
    ("pipeline",),  # how stages are scheduled (overlap), not what they compute
    ("device",),
    ("cluster",),
    ("rollout", "workers"),
    ("rollout", "worker_gpus"),
    # Placement and engine memory: which GPUs, how much of them, how long a sequence vLLM holds (a request
    # that does not fit is refused, never cut), so none of these changes a sample.
    ("rollout", "gpu_ids"),
    ("rollout", "max_model_len"),
    ("rollout", "gpu_memory_utilization"),
    ("update", "gpu_ids"),
    ("reward", "workers"),
    ("update", "main_process_ip"),
    ("update", "main_process_port"),
    ("checkpoint", "every"),  # where θ is kept between updates (memory or disk), not what it is
)
_HASH_OUT_AT_DEFAULT = {
    ("update", "mixed_precision"): "no",
    ("rollout", "tensor_parallel_size"): 1,
    ("prefix", "ratio_of"): "draft",
    ("update", "num_machines"): 1,  # hashed when set, as num_processes: the group's size orders its sums
    ("rollout", "lora_requests"): LORA_REQUESTS_DEFAULT,
    ("update", "max_tokens_per_micro_batch"): None,  # its default before it became a budget (DEFAULTS_BEFORE)
    ("update", "packed"): False,
    ("update", "strategy"): "ddp",
    ("rollout", "filter_groups"): False,
    ("rollout", "max_rounds"): 3,
    ("reward", "overlong"): "none",
    ("reward", "overlong_buffer"): 16,
    ("reward", "overlong_penalty"): 1.0,
    ("loss", "rollout_correction"): "none",
    ("loss", "rollout_correction_cap"): 2.0,
    ("loss", "prefix_mismatch_metrics"): False,
    ("prefix", "when"): "always",
    ("prefix", "failure_drafts"): 1,
    ("prefix", "steps"): 1,
    # equal to the plain path to 1e-6 and bitwise when one chunk holds the micro-batch (every tiny preset)
    ("update", "logprob_chunk_size"): 0,
    ("update", "gradient_checkpointing"): None,  # recomputes the same activations: the same gradients
    ("update", "lr_warmup_steps"): 0,
}


def _on_cuda(device: str) -> bool:
    """Whether `device` puts the run on a CUDA GPU: cuda[:N], or auto where torch sees one (as
    engine/models.resolve_device places it; torch imported here only then)."""
    if device != "auto":
        return device.startswith("cuda")
    import torch

    return torch.cuda.is_available()


# The most iterations a run may have: far past any run (a million updates), and a bound on what a run's
# bookkeeping walks (a manifest per iteration and stage); `iterations=10**20` was a MemoryError traceback.
MAX_ITERATIONS = 1_000_000


class RunConfig(_Section):
    algorithm: AlgorithmName = Field("thinking_seeds", description="Method preset (docs/algorithm.md §4).")
    iterations: int = Field(10, ge=1, le=MAX_ITERATIONS, description="Training iterations.")
    started_iterations: int | None = Field(
        None,
        ge=1,
        le=MAX_ITERATIONS,
        description="Set by `ts train` on a run it extends (iterations raised): the iterations the run was started "
        "with. The config hash keeps that value, so the run's finished stages stay done; not for --set.",
    )
    seed: int = Field(0, description="Seed for sampling and data order.")
    device: str = Field(
        "auto",
        description="Where the engine and the trainer run: auto (the first CUDA GPU when torch sees one, else "
        "the CPU), cpu, cuda or cuda:N. Checkpoints are always written from CPU copies, "
        "so a run resumes on any device.",
    )
    reward: RewardConfig = Field(
        default_factory=RewardConfig,
        description="How responses are scored (a backend "
        "name alone, e.g. reward=reasoning_gym, is short for {backend: reasoning_gym}).",
    )
    logger: list[Literal["console", "tensorboard", "mlflow", "wandb"]] = Field(
        default_factory=lambda: ["console"],
        description="Experiment trackers (verl's trainer.logger): every metric and "
        "the config; mlflow to <run>/mlruns and wandb offline unless MLFLOW_TRACKING_URI / WANDB_MODE say otherwise.",
    )
    cluster: ClusterConfig = Field(
        default_factory=ClusterConfig,
        description="Where rollout and verification workers run (cluster=ray is short for {kind: ray}).",
    )
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
    pipeline: PipelineConfig = Field(
        default_factory=PipelineConfig,
        description="How the stages are scheduled (out of the config hash, but for max_staleness).",
    )

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_shorthand(cls, v: Any) -> Any:
        return {"backend": v} if isinstance(v, str) else v

    @field_validator("cluster", mode="before")
    @classmethod
    def _cluster_shorthand(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v

    @model_validator(mode="after")
    def _workers_need_a_cluster(self) -> RunConfig:
        if self.cluster.weights == "object_store" and self.model.lora is not None:
            raise ValueError(
                "cluster.weights=object_store ships whole weight files, not LoRA adapters with their base: "
                "use cluster.weights=path (a filesystem every node mounts) with model.lora"
            )
        if self.cluster.kind == "local" and self.rollout.workers > 1:
            raise ValueError(
                f"rollout.workers={self.rollout.workers} needs cluster=ray (one engine per process on cluster=local); "
                "set cluster=ray with cluster.address or RAY_ADDRESS, or rollout.workers=1"
            )
        return self

    @model_validator(mode="after")
    def _trainer_machines(self) -> RunConfig:
        u = self.update
        if u.num_machines > 1 and u.launcher != "accelerate":
            raise ValueError(
                f"update.num_machines={u.num_machines} needs update.launcher=accelerate (the persistent trainer, "
                f"which the other machines join once per run with `ts trainer-node`), not {u.launcher}"
            )
        if u.packed and u.max_tokens_per_micro_batch is None:
            raise ValueError(
                "update.packed=true packs each micro-batch's sequences into one row: set "
                "update.max_tokens_per_micro_batch (the row's length), or update.packed=false"
            )
        if u.strategy == "fsdp2" and u.launcher == "in_process":
            raise ValueError(
                "update.strategy=fsdp2 shards the model across trainer processes: use update.launcher=accelerate "
                "(or accelerate_per_update), not in_process"
            )
        if u.strategy == "fsdp2" and u.num_processes * u.num_machines == 1:
            raise ValueError(
                "update.strategy=fsdp2 shards the model across trainer processes, and there is one: set "
                "update.num_processes (or num_machines) to 2 or more, or update.strategy=ddp"
            )
        if u.strategy == "fsdp2" and self.model.lora is not None:
            raise ValueError(
                "update.strategy=fsdp2 shards a full fine-tune; with model.lora the adapters are small: use "
                "update.strategy=ddp"
            )
        if u.num_machines > 1 and not u.main_process_ip:
            raise ValueError(
                f"update.num_machines={u.num_machines} needs update.main_process_ip: the IP of the driver's machine "
                "(machine rank 0), which the other machines reach"
            )
        return self

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_RE.match(v):
            raise ValueError("must be auto, cpu, cuda or cuda:N (e.g. cuda:1)")
        return v

    @model_validator(mode="after")
    def _precision_consistent(self) -> RunConfig:
        u = self.update
        if u.mixed_precision == "auto":  # resolved here, so config.yaml records the choice (a run keeps it)
            u.mixed_precision = "bf16" if self.model.dtype == "float32" and _on_cuda(self.device) else "no"
        if u.mixed_precision == "bf16" and self.model.dtype != "float32":
            raise ValueError(
                "update.mixed_precision=bf16 keeps fp32 master weights: set model.dtype=float32 "
                f"(got {self.model.dtype}; model.dtype=bfloat16 trains bf16 weights without mixed precision)"
            )
        corrects = self.loss.rollout_correction != "none"
        if corrects and u.recompute_old_logprobs is False:
            raise ValueError(
                f"loss.rollout_correction={self.loss.rollout_correction} weighs each token by π_trainer/π_engine and "
                "needs the trainer's π_old: leave update.recompute_old_logprobs unset or true"
            )
        if u.recompute_old_logprobs is None:  # automatic: resolved here, so config.yaml records the choice
            u.recompute_old_logprobs = self.precision_differs or corrects
        elif not u.recompute_old_logprobs and self.precision_differs:
            bf16 = "update.mixed_precision=bf16" if u.mixed_precision == "bf16" else f"model.dtype={self.model.dtype}"
            raise ValueError(
                f"update.recompute_old_logprobs=false with {bf16}: the engine's bf16 "
                "log-probs are not the trainer's, so on-policy ratios would not be 1; leave it unset or true"
            )
        if self.pipeline.max_staleness > 0 and u.recompute_old_logprobs and not corrects:
            raise ValueError(
                f"pipeline.max_staleness={self.pipeline.max_staleness} with update.recompute_old_logprobs: the "
                "trainer's π_old is θ_k, not the older policy that wrote the samples, so nothing would account for "
                "their age; set loss.rollout_correction (e.g. token_tis: the decoupled loss) or, in float32, "
                "update.recompute_old_logprobs=false (ratios against the writer's own log-probs)"
            )
        return self

    @model_validator(mode="after")
    def _staleness_supported(self) -> RunConfig:
        s = self.pipeline.max_staleness
        if s > 0 and self.cluster.kind != "local":
            raise ValueError(
                f"pipeline.max_staleness={s} samples ahead in the pipeline's process: set cluster=local "
                "(asynchronous Ray rollout workers are not built), or pipeline.max_staleness=0"
            )
        if s > 0 and self.prefix.when == "on_failure":
            raise ValueError(
                f"pipeline.max_staleness={s} with prefix.when=on_failure: the seeding probe is θ_k's own, so the "
                "iteration cannot be sampled before θ_k exists; use prefix.when=always, or pipeline.max_staleness=0"
            )
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

    @model_validator(mode="after")
    def _algorithm_consistent(self, info: ValidationInfo) -> RunConfig:
        # The presets set these; an override that contradicts the method would silently run
        # another method under this one's name.
        seeds = self.rollout.seeds_per_group
        if self.algorithm in ("grpo", "dr_grpo") and seeds != 0:
            raise ValueError(f"algorithm={self.algorithm} is on-policy: rollout.seeds_per_group must be 0, got {seeds}")
        if self.algorithm not in ("grpo", "dr_grpo") and seeds == 0:
            raise ValueError(
                f"algorithm={self.algorithm} needs seeded samples: "
                f"rollout.seeds_per_group must be in [1, {self.rollout.group_size}]"
            )
        full = self.prefix.ratio_min == 1.0 and self.prefix.ratio_max == 1.0
        if self.algorithm in ("seq_mix", "luffy") and not full:
            raise ValueError(
                f"algorithm={self.algorithm} mixes whole trajectories: prefix.ratio_min and ratio_max must be 1.0"
            )
        if (
            self.algorithm in ("thinking_seeds", "thinking_seeds_adaptive", "prefix_context")
            and self.prefix.ratio_max >= 1.0
        ):
            raise ValueError(
                f"algorithm={self.algorithm} continues a prefix: "
                "prefix.ratio_max must be < 1.0 (use seq_mix for whole trajectories)"
            )
        if self.prefix.source == "dataset" and self.algorithm != "luffy":
            raise ValueError("prefix.source=dataset is LUFFY's guidance: use algorithm=luffy")
        from thinking_seeds.plugins import (
            check_loggers,
        )  # a tracker whose package is missing fails here, before any work

        if checks_outside(info):
            check_loggers(self.logger)
        if self.data.source in ("reasoning_gym", "countdown", "game24") and self.reward.backend == "math_verify":
            raise ValueError(
                f"data.source={self.data.source} is scored by reasoning-gym's own checkers: set "
                "reward=reasoning_gym (or your own reward.fn)"
            )
        if self.advantage.baseline == "same_seed" and seeds and self.rollout.continuations_per_seed < 2:
            raise ValueError(
                "advantage.baseline=same_seed compares continuations of one seed: set "
                "rollout.continuations_per_seed >= 2"
            )
        if self.prefix.when == "on_failure" and seeds and self.rollout.filter_groups:
            raise ValueError(
                "prefix.when=on_failure is not implemented with rollout.filter_groups (its later rounds seed every "
                "prompt): set one of them off"
            )
        if self.pool.size < 1 and not self.pool.include_initial and seeds > 0:
            raise ValueError("pool is empty: set pool.size >= 1 or pool.include_initial=true")
        return self

    @property
    def seeded(self) -> bool:
        """Whether iterations draw samples that start from someone else's tokens."""
        return self.rollout.seeds_per_group > 0

    def config_hash(self) -> str:
        """Stable hash of every setting that changes what is computed: part of each stage's cache key.

        An extended run keeps the hash it started with (its identity, in every manifest and archive):
        `iterations` hashes as `started_iterations`. Raising it changes no finished stage: the stage
        seeds do not read it (pipeline/graph.py), and the evaluation at the old end stays done."""
        data = self.hashed_settings()
        if self.started_iterations is not None:
            data["iterations"] = self.started_iterations
        blob = json.dumps(data, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def hashed_settings(self) -> dict[str, Any]:
        """The settings the config hash covers, as nested dicts (`iterations` as it is now): what a
        resumed run's config is compared with, key by key (pipeline/resume.py)."""
        data = self.model_dump(mode="json")
        data.pop("started_iterations", None)
        if self.update.num_processes * self.update.num_machines == 1:
            # One training process computes the same weights, bit for bit, wherever it runs
            # (tests/e2e/test_update_processes.py): a run may resume under another launcher, and runs
            # hashed before the default became accelerate keep their hashes.
            data["update"]["launcher"] = "in_process"
        staleness = self.pipeline.max_staleness
        for path in _HASH_ALWAYS_OUT:
            _drop(data, path)
        if staleness:  # the one pipeline setting that changes what is computed (which θ samples)
            data["pipeline"] = {"max_staleness": staleness}
        for path, default in _HASH_OUT_AT_DEFAULT.items():
            if _get(data, path) == default:
                _drop(data, path)
        return data


def _get(data: dict, path: tuple[str, ...]) -> Any:
    for part in path:
        data = data.get(part, {}) if isinstance(data, dict) else {}
    return data


def _drop(data: dict, path: tuple[str, ...]) -> None:
    for part in path[:-1]:
        data = data.get(part, {})
    data.pop(path[-1], None)
