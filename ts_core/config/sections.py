"""The sections of a run configuration: one strict pydantic model per YAML section.

Every field has a help text (shown by `ts config keys`) and a validated range; checks that span
several keys of one section live on that section (`_ranges`, `_seeds`). Checks across sections
(the method against the seeding, the precision against the model dtype) live on RunConfig
(config/run_config.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

__all__ = [
    "AdvantageConfig",
    "CheckpointConfig",
    "ClusterConfig",
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
    "UpdateConfig",
]


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


class LoraSettings(_Section):
    r: int = Field(8, ge=1, le=1024, description="LoRA rank.")
    alpha: float = Field(16.0, gt=0.0, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Module names that get adapters (Llama/Qwen2 attention projections by default).",
    )


class ModelConfig(_Section):
    path: str = Field("builtin:tiny", description="Local HF checkpoint dir, or builtin:tiny / builtin:smollm2.")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Weights dtype for rollout and update.")
    lora: LoraSettings | None = Field(
        None,
        description="Train LoRA adapters (peft) instead of all weights: policy steps and pool snapshots then "
        "hold only the adapter (megabytes); the engine samples from base + adapter merged (vLLM: the adapter "
        "per request on the base, rollout.lora_requests).",
    )


class RewardConfig(_Section):
    backend: Literal["math_verify", "reasoning_gym", "custom"] = Field(
        "math_verify",
        description="Verifier: math-verify on the \\boxed{} answer, reasoning-gym's checker of each "
        "row's data set, or the user's function (reward.fn; setting fn selects custom).",
    )
    fn: str | None = Field(
        None,
        description="custom: package.module:function, called as fn(data_source, solution_str, "
        "ground_truth, extra_info) -> float | {'score': float} | None (verl's custom reward).",
    )
    partial_credit: bool = Field(
        True,
        description="reasoning_gym: use the checker's partial credit as the reward (countdown gives 0.05 for the "
        "right numbers with the wrong value); false: 1 for a full score, else 0.",
    )
    timeout_s: float = Field(5.0, gt=0.0, le=600.0, description="Per-response time limit; a slower one is 'timeout'.")
    overlong: Literal["none", "mask", "soft"] = Field(
        "none",
        description="Responses that hit rollout.max_new_tokens without ending (DAPO): none keeps their reward; "
        "mask zeroes their advantage (no gradient; they still count in the group baseline); soft subtracts DAPO's "
        "linear overlong penalty over the last reward.overlong_buffer tokens before the budget (up to "
        "reward.overlong_penalty at the budget) from the reward the advantage sees (the `reward` column keeps the "
        "verifier's score).",
    )
    overlong_buffer: int = Field(
        16,
        ge=1,
        description="overlong=soft: tokens before max_new_tokens over which the penalty grows (DAPO's L_cache).",
    )
    overlong_penalty: float = Field(
        1.0, ge=0.0, description="overlong=soft: the penalty at max_new_tokens (DAPO's penalty_factor)."
    )
    workers: int = Field(
        1,
        ge=1,
        le=1024,
        description="Verifier workers: processes of the local pool (cluster=local), or Ray actors that each hold "
        "one verifier (cluster=ray). Verdicts do not depend on it.",
    )

    @model_validator(mode="before")
    @classmethod
    def _fn_means_custom(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("fn") and "backend" not in data:
            data = {**data, "backend": "custom"}
        return data

    @model_validator(mode="after")
    def _fn(self, info: ValidationInfo) -> RewardConfig:
        if self.backend == "custom":
            if not self.fn:
                raise ValueError("reward.backend=custom needs reward.fn=package.module:function")
            from thinking_seeds.plugins import (
                load_reward_fn,
            )  # imports the user's module: a typo fails here, before any work

            if checks_outside(info):
                load_reward_fn(self.fn)
        elif self.fn:
            raise ValueError(f"reward.fn is for reward.backend=custom, not {self.backend}")
        return self


class ReasoningGymTask(_Section):
    name: str = Field(
        ..., description="A reasoning-gym data set name (reasoning_gym.factory.DATASETS), e.g. countdown."
    )
    weight: float = Field(1.0, gt=0.0, description="Share of the mixture (relative to the other tasks' weights).")
    config: dict[str, Any] = Field(default_factory=dict, description="The data set's own config (e.g. min_numbers).")


class DataConfig(_Section):
    source: Literal["chain_sum", "countdown", "game24", "reasoning_gym", "parquet"] = Field(
        "chain_sum",
        description="Built-in task (chain_sum: the fast demo; countdown: +/- countdown, many solutions per "
        "prompt; game24: the 24 game, the continuation decides), any reasoning-gym data set or mixture by "
        "name (data.tasks), or a user's verl Parquet.",
    )
    tasks: list[ReasoningGymTask] = Field(
        default_factory=list,
        description="source=reasoning_gym: the data sets of the mixture, each {name, weight, config}.",
    )
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
    def _ranges(self, info: ValidationInfo) -> DataConfig:
        if self.min_terms > self.max_terms:
            raise ValueError(f"data.min_terms={self.min_terms} must be <= data.max_terms={self.max_terms}")
        if self.min_digits > self.max_digits:
            raise ValueError(f"data.min_digits={self.min_digits} must be <= data.max_digits={self.max_digits}")
        if self.source == "parquet" and not (self.train_path and self.val_path):
            raise ValueError("data.source=parquet needs data.train_path and data.val_path")
        if self.source == "reasoning_gym":
            if not self.tasks:
                raise ValueError(
                    "data.source=reasoning_gym needs data.tasks, e.g. "
                    "--set 'data.tasks=[{name: countdown}, {name: basic_arithmetic, weight: 2}]'"
                )
            from thinking_seeds.plugins import check_task_names  # imports reasoning-gym: only for this source

            names = [t.name for t in self.tasks]
            if len(set(names)) != len(names):
                raise ValueError(f"data.tasks names a data set twice: {names}")
            if checks_outside(info):
                check_task_names(names)
        elif self.tasks:
            raise ValueError(f"data.tasks is for data.source=reasoning_gym, not {self.source}")
        return self


class PoolConfig(_Section):
    size: int = Field(4, ge=1, le=1000, description="Historical snapshots kept in the pool H.")
    include_initial: bool = Field(True, description="Keep the initial model (step 0) in H forever.")
    pick: Literal["uniform", "recent", "oldest"] = Field(
        "uniform", description="How a seed's source checkpoint is drawn from H."
    )
    snapshot_every: int = Field(1, ge=1, description="Save the policy into H every this many iterations.")


class PrefixConfig(_Section):
    ratio_min: float = Field(0.2, ge=0.0, le=1.0, description="Lower end of the prefix fraction λ ~ U[min, max].")
    ratio_max: float = Field(0.6, ge=0.0, le=1.0, description="Upper end of the prefix fraction λ.")
    cut: Literal["token", "line"] = Field(
        "token", description="Cut the draft at a token, or back to the last step boundary."
    )
    loss: Literal["clip", "shaped", "capped", "context", "position"] = Field(
        "clip",
        description="Loss on prefix tokens (docs/algorithm.md §3). Default `clip`: it had the best test accuracy at "
        "every seed and the largest strategy diversity on average in docs/results/ablation-loss. `position`: the clip "
        "term of prefix token t (0-based) of an L-token prefix weighted by w = 1 - t/L (our own position-aware form; "
        "not yet ablated).",
    )
    shaped_gamma: float = Field(0.1, gt=0.0, description="LUFFY policy shaping f(p)=p/(p+γ).")
    cap: float = Field(2.0, gt=0.0, description="`capped`: truncate the prefix importance weight at this value.")
    source: Literal["historical", "dataset"] = Field(
        "historical", description="Who writes prefixes: pool checkpoints, or the data set's solutions (luffy)."
    )
    reuse: bool = Field(
        False, description="Draw stored seeds for (prompt, checkpoint) from the corpus instead of regenerating."
    )
    ratio_of: Literal["draft", "budget"] = Field(
        "draft",
        description="What λ is a fraction of. draft: the whole draft's length |z| (each draft is generated to its "
        "end, cut at ⌊λ·|z|⌋, and scored: draft_reward). budget: rollout.max_new_tokens T, so the cut is known "
        "before sampling and each draft is generated only up to ⌊λ·T⌋ tokens (fewer tokens; a draft that ends "
        "sooner is cut at ⌊λ·|z|⌋ as with draft); the seeds are then longer for drafts longer than their budget, "
        "and drafts are not scored (draft_reward empty, so filter=correct_draft is refused).",
    )
    filter: Literal["none", "correct_draft"] = Field(
        "none",
        description="correct_draft: keep only seeds whose whole draft was correct (PrefixRL's choice); a seed "
        "whose draft was wrong is replaced by an on-policy sample, so the group keeps its size. On countdown +0.019 "
        "pass@1 [+0.001, +0.037] for -0.003 pass@64 (README, issue #9): not significant over the 3 credit variants "
        "tested, and it drops failed drafts, so none stays the default.",
    )

    when: Literal["always", "on_failure"] = Field(
        "always",
        description="Which prompts get seeds. always: every prompt, seeds_per_group of its group_size samples. "
        "on_failure (adaptive, success-conditioned): θ_k first samples group_size - seeds_per_group on-policy "
        "responses per prompt; only a prompt none of them solved (reward < 1) gets drafts, continued in its "
        "remaining seeds_per_group slots, and every other prompt gets that many more on-policy samples, so each "
        "group keeps group_size samples. Needs filter=correct_draft (a seed comes only from a draft verified "
        "correct; a wrong draft's slot is on-policy). Drafts of k are then sampled in the seeds stage after θ_k's "
        "probe, never ahead (pipeline.overlap drafts nothing). Metrics seeding/* (draft_tokens: the cost).",
    )

    @model_validator(mode="after")
    def _ranges(self) -> PrefixConfig:
        if self.ratio_min > self.ratio_max:
            raise ValueError(f"prefix.ratio_min={self.ratio_min} must be <= prefix.ratio_max={self.ratio_max}")
        if self.ratio_of == "budget" and self.filter == "correct_draft":
            raise ValueError(
                "prefix.filter=correct_draft needs each whole draft's reward, and prefix.ratio_of=budget stops "
                "drafts at their cut: set prefix.ratio_of=draft or prefix.filter=none"
            )
        if self.when == "on_failure" and self.filter != "correct_draft":
            raise ValueError(
                "prefix.when=on_failure seeds a failing prompt only from drafts verified correct: "
                "set prefix.filter=correct_draft (and prefix.ratio_of=draft)"
            )
        return self


class RolloutConfig(_Section):
    engine: Literal["hf", "vllm"] = Field("hf", description="Generation engine.")
    prompts_per_iteration: int = Field(16, ge=1, description="Prompts drawn per iteration.")
    group_size: int = Field(8, ge=1, description="Samples per prompt (seeded + on-policy).")
    seeds_per_group: int = Field(4, ge=0, description="How many of the group's samples start from a historical seed.")
    temperature: float = Field(
        1.0, gt=0.0, le=5.0, description="Sampling temperature (also used for training log-probs)."
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(96, ge=1, description="Longest response (prefix + continuation), in tokens.")
    batch_size: int = Field(128, ge=1, description="Sequences generated together.")
    continuations_per_seed: int = Field(
        1,
        ge=1,
        description="Continue each seed this many times (seeds_per_group counts the seeded samples, so "
        "seeds_per_group / continuations_per_seed drafts are written per prompt); >1 lets advantage.baseline=same_seed "
        "judge a continuation against other continuations of the same seed.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=1024,
        description="Rollout workers (cluster=ray: Ray actors, each holding an engine; cluster=local: must be 1). "
        "Generation requests are cut into shards of rollout.batch_size, each with its own seed, so the samples "
        "are the same with 1 worker or N.",
    )
    worker_gpus: float = Field(
        0.0,
        ge=0.0,
        description="GPUs each Ray rollout worker reserves (0 on CPUs; rollout.tensor_parallel_size for vLLM on GPUs).",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="vLLM: GPUs one engine shards its model over (tensor parallelism)."
    )
    filter_groups: bool = Field(
        False,
        description="Dynamic sampling (DAPO, verl's filter_groups): drop groups whose rewards are all equal (all "
        "right or all wrong, seeded samples included: zero advantage, no signal) and sample further prompts from the "
        "training split, round after round, until prompts_per_iteration informative groups are kept or "
        "rollout.max_rounds rounds are done (the batch is then smaller; with none kept, round 0 is trained as it is). "
        "Extra rounds get their seeds drafted on demand by the same pool. Metrics rollout/filter_groups/*.",
    )
    max_rounds: int = Field(
        3,
        ge=1,
        le=100,
        description="filter_groups: most sampling rounds per iteration, the first included (verl's "
        "max_num_gen_batches).",
    )
    lora_requests: bool = Field(
        LORA_REQUESTS_DEFAULT,
        description="vLLM with model.lora: true serves every checkpoint as its LoRA adapter on θ_0 (vLLM "
        "enable_lora, one adapter per request), so the seeds stage samples all pool members in ONE engine call; "
        "false merges each adapter into full weights (peft) and swaps them in, one call per checkpoint. Same "
        "seeds either way; samples equal up to float rounding. Ignored with rollout.engine=hf or without "
        "model.lora. Default false: on vLLM's CPU backend the swaps were 2.1x faster (BENCHMARKS.md, 'vLLM: "
        "per-request LoRA adapters vs weight swaps'); on a GPU (punica kernels) measure with bench/vllm_lora.py.",
    )

    @model_validator(mode="after")
    def _seeds(self) -> RolloutConfig:
        if self.seeds_per_group > self.group_size:
            raise ValueError(
                f"rollout.seeds_per_group={self.seeds_per_group} must be in [0, rollout.group_size={self.group_size}]"
            )
        if self.seeds_per_group % self.continuations_per_seed:
            raise ValueError(
                f"rollout.seeds_per_group={self.seeds_per_group} must be a multiple of "
                f"rollout.continuations_per_seed={self.continuations_per_seed}"
            )
        return self


class ClusterConfig(_Section):
    kind: Literal["local", "ray"] = Field(
        "local",
        description="Where generation and verification run: local (this process and its verifier pool) or ray "
        "(rollout.workers / reward.workers Ray actors on a running cluster; needs the `ray` extra).",
    )
    address: str | None = Field(
        None,
        description="cluster=ray: the cluster's address HOST:PORT (as printed by `ray start --head`); "
        "unset: the RAY_ADDRESS environment variable.",
    )
    shard_retries: int = Field(
        3, ge=0, le=100, description="cluster=ray: times a shard is retried after its worker died."
    )
    weights: Literal["path", "object_store"] = Field(
        "path",
        description="cluster=ray: how rollout workers get a checkpoint's weights. path: they read it where the "
        "driver wrote it (the runs directory on a filesystem every node mounts); object_store: the driver puts "
        "its weight files into Ray's object store once per checkpoint and each worker copies them to its own disk "
        "(no shared filesystem needed; not with model.lora).",
    )
    worker_cpus: float = Field(
        1.0,
        gt=0.0,
        description="cluster=ray: CPUs each rollout or verifier actor reserves (Ray's num_cpus; the actors of "
        "rollout.workers + reward.workers must fit the cluster at once).",
    )
    start_timeout_s: float = Field(
        600.0, gt=0.0, description="cluster=ray: how long the workers may take to start before the run stops."
    )


class AdvantageConfig(_Section):
    estimator: Literal["grpo", "dr_grpo", "rloo"] = Field("grpo", description="Group-relative advantage estimator.")
    baseline: Literal["group", "on_policy", "same_seed"] = Field(
        "group",
        description="Whose rewards form a sample's baseline: the whole group; on-policy samples only (LUFFY's "
        "split); or same_seed: a seeded sample only against the other continuations of its own seed, an on-policy "
        "sample against the on-policy samples (needs rollout.continuations_per_seed >= 2). Default by the countdown "
        "ablations (README, issue #9): neither alternative beat group at equal seed.",
    )


class LossConfig(_Section):
    clip_ratio_low: float = Field(0.2, ge=0.0, lt=1.0, description="PPO ε_low.")
    clip_ratio_high: float = Field(0.28, ge=0.0, description="PPO ε_high (clip-higher).")
    clip_ratio_c: float | None = Field(
        None, gt=1.0, description="Dual-clip constant c for negative advantages (None: off)."
    )
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How token losses become one number (verl names)."
    )
    entropy_coeff: float = Field(0.0, ge=0.0, description="Entropy bonus weight.")
    kl_coef: float = Field(0.0, ge=0.0, description="KL-to-reference penalty weight (reference = initial model).")
    kl_type: Literal["k1", "k3"] = Field("k3", description="KL estimator.")
    rollout_correction: Literal["none", "token_tis", "seq_tis", "seq_mask"] = Field(
        "none",
        description="Correct the rollout–trainer mismatch (verl's decoupled rollout_correction): each token the engine "
        "sampled with θ_k gets a detached loss weight ρ = π_trainer(θ_k) / π_engine: token_tis truncates it per token "
        "at the cap (verl rollout_is=token, TRL vllm_importance_sampling_correction), seq_tis uses the sequence's "
        "product truncated at the cap (rollout_is=sequence), seq_mask drops sequences whose product leaves "
        "[1/cap, cap] (rollout_rs=sequence). Needs the trainer's π_old (update.recompute_old_logprobs, turned on). "
        "Metrics rollout_corr/* (KL k1/k3, max |log ratio|, share truncated or masked) are logged whenever π_old "
        "is recomputed.",
    )
    rollout_correction_cap: float = Field(
        2.0,
        gt=1.0,
        description="loss.rollout_correction: the truncation cap of ρ (verl rollout_is_threshold, TRL "
        "vllm_importance_sampling_cap); seq_mask keeps [1/cap, cap].",
    )
    prefix_mismatch_metrics: bool = Field(
        False,
        description="Split the prefix's π_θ/π_h gap into its two factors, by source age: the historical policy's age "
        "(trainer's π_θk vs the trainer's rescoring of π_h) and the numerics of the engine that wrote the prefix "
        "(engine-written behaviour log-probs vs that rescoring). Costs one forward of every pool member over its "
        "prefixes, and one of θ_k, per iteration (in the verify stage). Metrics rollout_corr/prefix_*/age=*.",
    )


class UpdateConfig(_Section):
    lr: float = Field(1e-4, gt=0.0, lt=1.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    grad_clip: float = Field(1.0, gt=0.0, description="Max global grad norm.")
    epochs: int = Field(1, ge=1, description="Passes over the iteration's rollouts.")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per pass (the batch split in this many parts).")
    micro_batch_size: int = Field(
        64,
        ge=1,
        description="Sequences per forward/backward (gradient accumulation); not used with max_tokens_per_micro_batch.",
    )
    max_tokens_per_micro_batch: int | None = Field(
        None,
        ge=1,
        description="Token budget of a forward/backward instead of micro_batch_size sequences: each process's "
        "sequences sorted by length and cut so that a micro-batch's input holds at most this many tokens (padded "
        "layout: rows x (longest context + longest response); packed: the sum of its tokens; a longer sequence "
        "trains alone). The loss is normalised by the mini-batch's global counts, so the gradient is the same as "
        "with micro_batch_size (tested). None: micro_batch_size sequences in the shuffled order.",
    )
    packed: bool = Field(
        False,
        description="With max_tokens_per_micro_batch: run each micro-batch as one row of concatenated sequences, "
        "positions restarting per sequence and no padding (transformers' packed-sequence masks: varlen kernels on "
        "flash attention, a block-diagonal mask on sdpa/eager, where attention still spans the whole row).",
    )
    strategy: Literal["ddp", "fsdp2"] = Field(
        "ddp",
        description="How the accelerate launchers' processes share the model. ddp: every process holds the "
        "whole model, gradients and AdamW state, gradients all-reduced. fsdp2: torch's fully_shard per decoder "
        "layer and on the whole model (parameters, gradients and AdamW state sharded across processes; "
        "all-gather before each layer, reduce-scatter after its backward); the full weights and optimizer state "
        "are gathered to rank 0 to save θ_{k+1}, the same files as ddp. Needs a full fine-tune (no model.lora).",
    )
    mixed_precision: Literal["no", "bf16"] = Field(
        "no",
        description="bf16: the update's forward runs under bf16 autocast (in process: torch.autocast; accelerate "
        "launcher: --mixed_precision bf16) with fp32 master weights and fp32 AdamW state (needs model.dtype=float32), "
        "and the engine generates with bf16 weights; no: everything in model.dtype.",
    )
    recompute_old_logprobs: bool | None = Field(
        None,
        description="Recompute π_old with the trainer's own forward (same precision, same micro-batches as the "
        "first optimizer step) instead of trusting the engine's log-probs. Unset: on exactly when engine and trainer "
        "numerics differ (model.dtype=bfloat16 or update.mixed_precision=bf16), so on-policy ratios stay exactly 1; "
        "false is refused then. Set true for vLLM in float32 if its parity matters to you.",
    )
    launcher: Literal["in_process", "accelerate", "accelerate_per_update"] = Field(
        "accelerate",
        description="Where the update runs. accelerate (default): a persistent trainer started once per run by "
        "`accelerate launch` (num_processes processes: gloo DDP on CPU, NCCL on GPUs), launched when the run starts "
        "and kept with model and optimizer in memory between updates; it reloads from disk whenever its base "
        "checkpoint is not the one it holds (same weights, bit for bit, as a fresh launch; with one process the "
        "same as in_process). in_process: in the pipeline's process, no second process (one model copy). "
        "accelerate_per_update: a fresh `accelerate launch` for every update (seconds of start-up per iteration).",
    )
    num_processes: int = Field(
        1,
        ge=1,
        description="Processes per machine for the accelerate launchers (one per GPU; on CPU, gloo processes). "
        "The trainer group has num_processes x num_machines processes.",
    )
    num_machines: int = Field(
        1,
        ge=1,
        description="Machines in the trainer group (launcher=accelerate only). The driver's machine runs machine "
        "rank 0; every other machine joins with `ts trainer-node --run-id RUN --machine-rank R` and needs the runs "
        "directory at the same path (a shared filesystem): docs/scaling.md.",
    )
    main_process_ip: str | None = Field(
        None,
        description="With num_machines > 1: the IP (or host name) of the driver's machine, where the trainer "
        "group meets (accelerate's --main_process_ip); the other machines must reach it.",
    )
    main_process_port: int = Field(
        29500,
        ge=1,
        le=65535,
        description="With num_machines > 1: the port on main_process_ip where the trainer group meets (accelerate's "
        "--main_process_port); must be free there. On one machine each launch takes a free port instead.",
    )

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _no_is_text(cls, v: Any) -> Any:
        return "no" if v is False else v  # YAML 1.1 reads a bare `no` (accelerate's word) as false

    @field_validator("betas", mode="before")
    @classmethod
    def _betas_from_yaml(cls, v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v  # YAML (and config.yaml) has lists, not tuples


class CheckpointConfig(_Section):
    every: int = Field(
        10,
        ge=1,
        description="Write θ with its AdamW state to policy/step_k/ every this many iterations (and at the "
        "end of the run and at pool.snapshot_every iterations, whose snapshots are the pool). Between "
        "checkpoints the trainer hands θ to the engine in memory, and a resumed run replays the updates "
        "since the newest checkpoint from the stored rollouts (bit-identical on the CPU). 10: a crash "
        "costs at most 9 replayed updates (a fraction of an iteration each: no sampling), while the "
        "write (~4.4 s/GB; 84 GB at 7B with AdamW) is paid once per 10 iterations, off the critical "
        "path. The vLLM engine, Ray workers, LoRA and update.launcher=accelerate_per_update read θ from "
        "its file: there every step is written, as before.",
    )
    keep_last: int | None = Field(
        None,
        ge=1,
        description="Keep only the last N policy steps (plus θ_0 and keep_every); None keeps all. The "
        "historical pool's snapshots are separate and always kept.",
    )
    keep_every: int | None = Field(None, ge=1, description="With keep_last: also keep every N-th policy step.")


class EvalConfig(_Section):
    every: int = Field(5, ge=1, description="Evaluate every this many iterations (and at the end).")
    prompts: int = Field(64, ge=1, description="Held-out prompts per evaluation.")
    samples: int = Field(16, ge=1, description="Samples per prompt (pass@k for k up to this).")
    temperature: float = Field(1.0, gt=0.0, description="Evaluation sampling temperature.")
    split: Literal["validation", "test"] = Field("validation", description="Held-out split.")
    test_samples: int = Field(
        16,
        ge=1,
        description="Samples per prompt of a comparison's final evaluation on the whole "
        "test split (pass@k for k up to this).",
    )
    seeded: bool = Field(
        True,
        description="At the final evaluation, also sample continuations of historical seeds "
        "(λ ~ U[prefix.ratio_min, ratio_max], or U[0.2, 0.6] for whole-trajectory and on-policy methods) "
        "for the explorable-space pass@k.",
    )


class PipelineConfig(_Section):
    """How the stages are scheduled, never what they compute: left out of the config hash, so a run
    resumes with any of these and its stage manifests and outputs are the same."""

    seeds_block: int = Field(
        1,
        ge=1,
        description="Draft the seeds of up to this many coming iterations at once, while the pool stays the "
        "same (until the next snapshot joins it): each member's weights are loaded once per block instead of "
        "once per iteration (at 7B a load is a 15 GB read), the drafts of the later iterations wait in memory "
        "for their seeds stage. The same members, picks, source ages and samples, bit for bit (every "
        "(member, iteration) call keeps its own shards and seeds). 1: each iteration drafts its own.",
    )

    overlap: bool | None = Field(
        None,
        description="Sample iteration k+1's seeds while update k runs (their writers are pool snapshots older "
        "than θ_{k+1}, already on disk), in a thread of the pipeline's process, beside the in-process update or "
        "while the accelerate trainer works; the seeds stage k+1 then only writes them: the same prefixes, "
        "manifests and weights either way. It needs a core (or GPU) free for the drafts: on 2 idle CPU cores it "
        "took 13-18% off an iteration of the tiny preset (SmolLM2 on vLLM: 14-16%), under other jobs' load nothing "
        "(BENCHMARKS.md). Unset: on when this process samples on the CPU (cluster=local, HF engine or vLLM), where "
        "that was measured; off on a GPU (the drafts' KV cache and the in-process update's activations would be in "
        "memory together; not measured yet) and on Ray.",
    )
