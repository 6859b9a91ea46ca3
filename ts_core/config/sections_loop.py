"""The sections that say how each iteration samples, scores, trains, checkpoints and evaluates: rollout,
cluster, advantage, loss, checkpoint, eval, pipeline; the update's own section is in sections_update.py
(the inputs -- model, reward, data, pool, prefix -- are in sections.py, which re-exports these). Split
from sections.py along that seam to keep each file readable; one strict pydantic model per YAML
section, every field with its help text.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from thinking_seeds.config.section_base import LORA_REQUESTS_DEFAULT, _Section

__all__ = [
    "MAX_EVAL_SAMPLES",
    "MAX_EVAL_SEQUENCES",
    "AdvantageConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "EvalConfig",
    "LossConfig",
    "PipelineConfig",
    "RolloutConfig",
]


# An evaluation samples prompts x samples responses and holds them all until it scores them (evals/
# evaluation.py; train/memory_plan.py counts their host memory, `ts plan` shows it): ~2**20 of them is
# gigabytes at a few hundred tokens each, and far past what pass@k needs. eval.samples=10**9 was a
# MemoryError traceback.
MAX_EVAL_SAMPLES = 65_536
MAX_EVAL_SEQUENCES = 2**20


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
    worker_gpus: float | None = Field(
        None,
        ge=0.0,
        description="GPUs each Ray rollout worker reserves (Ray's num_gpus; its engine runs on the first of them). "
        "Unset: tied to the engine's device, 0 when `device` is cpu (or auto without a GPU), else "
        "rollout.tensor_parallel_size for vLLM and 1 for the HF engine. vLLM refuses fewer than "
        "tensor_parallel_size whole GPUs.",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="vLLM: GPUs one engine shards its model over (tensor parallelism)."
    )
    gpu_ids: list[int] | None = Field(
        None,
        description="The engine's GPUs on this machine (indices as torch numbers the visible ones), one per "
        "tensor-parallel shard (rollout.tensor_parallel_size of them). Unset: the GPU of `device` (cuda:N: N, "
        "N+1, ...). The trainer's are update.gpu_ids; where the two share a GPU, vLLM takes only what it needs "
        "(rollout.gpu_memory_utilization).",
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="vLLM: the longest sequence (context + new tokens) the engine holds. Unset: the longest "
        "prompt of the run's data plus rollout.max_new_tokens (a seed is part of the response's budget). A "
        "request that does not fit is refused in one line, never cut; so is a length above the model's "
        "max_position_embeddings.",
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="vLLM on a GPU: the share of the GPU's memory the engine may take (weights, KV cache, "
        "activations). Unset: on a GPU of its own, 90% of the memory free when it starts, the KV cache taking "
        "what the weights leave; on a GPU it shares with a trainer process, just the weights, the KV cache "
        "of rollout.batch_size sequences of max_model_len tokens and a margin, so the trainer keeps the rest.",
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
        "enable_lora, one adapter per request), so the seeds stage samples all pool members in one engine "
        "call per shard group; false merges each adapter into full weights (peft) and swaps them in, one call "
        "per checkpoint. Same seeds either way; samples equal up to float rounding. Ignored with "
        "rollout.engine=hf or without model.lora. Default false: on vLLM's CPU backend the swaps were 2.1x "
        "faster (BENCHMARKS.md, 'vLLM: per-request LoRA adapters vs weight swaps'); on a GPU (punica kernels) "
        "measure with bench/vllm_lora.py.",
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
        "ablations (docs/results/countdown-credit.md, countdown-same-seed.md): neither alternative beat group at "
        "equal seed.",
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
        "path. LoRA and update.launcher=accelerate_per_update read θ from its file: there every step is "
        "written, as before (vLLM takes θ in memory through reload_weights, fsdp2 from rank 0's gathered "
        "copy, Ray rollout workers through the object store).",
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
    prompts: int = Field(
        64,
        ge=1,
        le=MAX_EVAL_SEQUENCES,
        description="Held-out prompts per evaluation (prompts × samples ≤ 2^20: all held until scored).",
    )
    samples: int = Field(
        16,
        ge=1,
        le=MAX_EVAL_SAMPLES,
        description="Samples per prompt (pass@k for k up to this; prompts × samples ≤ 2^20).",
    )
    temperature: float = Field(1.0, gt=0.0, description="Evaluation sampling temperature.")
    split: Literal["validation", "test"] = Field("validation", description="Held-out split.")
    test_samples: int = Field(
        16,
        ge=1,
        le=MAX_EVAL_SAMPLES,
        description="Samples per prompt of a comparison's final evaluation on the whole "
        "test split (pass@k for k up to this).",
    )
    seeded: bool = Field(
        True,
        description="At the final evaluation, also sample continuations of historical seeds "
        "(λ ~ U[prefix.ratio_min, ratio_max], or U[0.2, 0.6] for whole-trajectory and on-policy methods) "
        "for the explorable-space pass@k.",
    )

    @model_validator(mode="after")
    def _bounded(self) -> EvalConfig:
        if self.prompts * self.samples > MAX_EVAL_SEQUENCES:
            raise ValueError(
                f"eval.samples={self.samples} x eval.prompts={self.prompts} = {self.prompts * self.samples:,} "
                f"responses held at once, more than {MAX_EVAL_SEQUENCES:,} (train/memory_plan.py: their host memory); "
                "lower eval.samples or eval.prompts"
            )
        return self


class PipelineConfig(_Section):
    """How the stages are scheduled: left out of the config hash, so a run resumes with any of these and
    its stage manifests and outputs are the same -- except max_staleness, which changes which policy
    samples (hashed when non-zero)."""

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

    max_staleness: int = Field(
        0,
        ge=0,
        description="Bounded-staleness asynchronous rollouts (one-step-off at 1, as verl's and prime-rl's): the "
        "on-policy samples and continuations of iteration k are generated by θ_{k-s} (θ_0 while k < s), so those "
        "of iteration k+1 are sampled, in a thread of the pipeline's process, while update k runs. Each sample's "
        "ratio is taken against the policy that wrote it: the engine's log-probs of θ_{k-s} (stored with its step "
        "in the rollouts' policy_version column), or, with update.recompute_old_logprobs, against the trainer's θ_k "
        "with loss.rollout_correction weighing θ_k against the writer (the decoupled loss: then required). Changes "
        "what is computed, so it is part of the config hash when non-zero. 0: synchronous, every sample from θ_k.",
    )
