"""The sections of a run configuration: one strict pydantic model per YAML section.

Every field has a help text (shown by `ts config keys`) and a validated range; checks that span
several keys of one section live on that section (`_ranges`, `_seeds`). Checks across sections
(the method against the seeding, the precision against the model dtype) live on RunConfig
(config/run_config.py). The sections of the iteration loop (rollout ... pipeline) live in
sections_loop.py and the update's in sections_update.py, both re-exported here; the shared base in
section_base.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from thinking_seeds.config.section_base import CHECK_OUTSIDE, LORA_REQUESTS_DEFAULT, _Section, checks_outside
from thinking_seeds.config.sections_loop import (
    AdvantageConfig,
    CheckpointConfig,
    ClusterConfig,
    EvalConfig,
    LossConfig,
    PipelineConfig,
    RolloutConfig,
)
from thinking_seeds.config.sections_update import UpdateConfig

__all__ = [
    "CHECK_OUTSIDE",
    "LORA_REQUESTS_DEFAULT",
    "checks_outside",
    "AdvantageConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "DataConfig",
    "EvalConfig",
    "LoraSettings",
    "LossConfig",
    "ModelConfig",
    "PREFIX_LOSSES",
    "PipelineConfig",
    "PoolConfig",
    "PrefixConfig",
    "ReasoningGymTask",
    "RewardConfig",
    "RolloutConfig",
    "UpdateConfig",
]


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


# The built-in prefix surrogates, registered by these names in algo/losses.py (tests/unit/test_losses.py
# checks the two agree); `context` keeps the prefix out of the loss.
PREFIX_LOSSES = ("clip", "shaped", "capped", "context", "position")


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
    cut: Literal["token", "line", "steps"] = Field(
        "token",
        description="Where a seed ends. token: at ⌊λ·|z|⌋. line: back from there to the last step boundary (a "
        "newline, ',' or ';'). steps: after exactly prefix.steps complete lines (newline-ended) of the draft, "
        "whatever λ (none of them the boxed answer); a draft with fewer steps gives no seed and its slot an "
        "on-policy sample.",
    )
    steps: int = Field(
        1,
        ge=1,
        le=64,
        description="prefix.cut=steps: how many complete step lines of the draft a seed keeps. 1 on the 24 game "
        "leaves the continuation a real 3-number subproblem (docs/results/game24-step-cut-probe.md).",
    )
    loss: str = Field(
        "clip",
        description="Loss on prefix tokens (docs/algorithm.md §3): one of "
        + ", ".join(PREFIX_LOSSES)
        + ", or your own surrogate as package.module:function (algo/losses.py: fn(logprobs, denom_logprobs, "
        "adv, settings, prefix_mask) -> (per-token loss, clipped mask), all (B, T)). Default `clip`: it had the "
        "best test accuracy at every seed and the largest strategy diversity on average in "
        "docs/results/ablation-loss. `position`: the clip term of prefix token t (0-based) of an L-token prefix "
        "weighted by w = 1 - t/L (our own position-aware form; no detectable effect in "
        "docs/results/game24-ablation-position).",
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
        "budget",
        description="What λ is a fraction of. budget (the default since issue 53; the paper's rule): "
        "rollout.max_new_tokens T, so the cut is known before sampling and each draft is generated only up to "
        "⌊λ·T⌋ tokens (0.62x the draft tokens on the tiny preset; a draft that ends sooner is cut at ⌊λ·|z|⌋ as "
        "with draft); the seeds are then longer for drafts longer than their budget, and drafts are not scored "
        "(draft_reward empty). draft: the whole draft's length |z| (each draft is generated to its end, cut at "
        "⌊λ·|z|⌋, and scored: draft_reward); what filter=correct_draft and cut=steps need, so left unset with "
        "either it is draft. Runs started before the change keep draft (config/run_config.py DEFAULTS_BEFORE).",
    )
    filter: Literal["none", "correct_draft"] = Field(
        "none",
        description="correct_draft: keep only seeds whose whole draft was correct (PrefixRL's choice); a seed "
        "whose draft was wrong is replaced by an on-policy sample, so the group keeps its size. On countdown +0.019 "
        "pass@1 [+0.001, +0.037] for -0.003 pass@64 (docs/results/countdown-credit.md): not significant over the "
        "3 credit variants tested, and it drops failed drafts, so none stays the default.",
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
    failure_drafts: int = Field(
        1,
        ge=1,
        le=16,
        description="when=on_failure: drafts per seed slot for each failing prompt. The first correct ones in draw "
        "order fill the slots (a slot with no correct draft left stays on-policy), so more drafts seed more hard "
        "prompts, at their tokens' cost (seeding/draft_tokens). 1: one draft per slot, as PrefixRL/QuestA's rule "
        "reads.",
    )

    @model_validator(mode="before")
    @classmethod
    def _whole_drafts_when_needed(cls, data: Any) -> Any:
        """ratio_of left unset: draft where the settings read whole drafts (their reward, their step lines)."""
        if isinstance(data, dict) and "ratio_of" not in data:
            if data.get("filter") == "correct_draft" or data.get("cut") == "steps":
                data = {**data, "ratio_of": "draft"}
        return data

    @model_validator(mode="after")
    def _ranges(self, info: ValidationInfo) -> PrefixConfig:
        if self.loss not in PREFIX_LOSSES:
            if ":" not in self.loss:
                raise ValueError(
                    f"prefix.loss={self.loss!r} is neither a built-in ({', '.join(PREFIX_LOSSES)}) nor "
                    "package.module:function"
                )
            from thinking_seeds.plugins import load_function  # imports the user's module: a typo fails here

            if checks_outside(info):
                load_function(self.loss, "prefix.loss")
        if self.ratio_min > self.ratio_max:
            raise ValueError(f"prefix.ratio_min={self.ratio_min} must be <= prefix.ratio_max={self.ratio_max}")
        if self.ratio_of == "budget" and self.filter == "correct_draft":
            raise ValueError(
                "prefix.filter=correct_draft needs each whole draft's reward, and prefix.ratio_of=budget stops "
                "drafts at their cut: set prefix.ratio_of=draft or prefix.filter=none"
            )
        if self.cut == "steps" and self.ratio_of == "budget":
            raise ValueError(
                "prefix.cut=steps reads each whole draft's step lines, and prefix.ratio_of=budget stops drafts at "
                "⌊λ·T⌋: set prefix.ratio_of=draft"
            )
        if self.steps != 1 and self.cut != "steps":
            raise ValueError(f"prefix.steps={self.steps} is read only with prefix.cut=steps: set prefix.cut=steps")
        if self.failure_drafts > 1 and self.when != "on_failure":
            raise ValueError(
                f"prefix.failure_drafts={self.failure_drafts} drafts more for prompts whose probe failed, and "
                "prefix.when=always has no probe: set prefix.when=on_failure or prefix.failure_drafts=1"
            )
        if self.when == "on_failure" and self.filter != "correct_draft":
            raise ValueError(
                "prefix.when=on_failure seeds a failing prompt only from drafts verified correct: "
                "set prefix.filter=correct_draft (and prefix.ratio_of=draft)"
            )
        return self
