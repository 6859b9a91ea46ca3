"""The `update` section: how the trainer turns a batch of rollouts into θ_{k+1} -- AdamW's settings and
lr ramp, passes and mini-batches, micro-batching (fixed size or a token budget), packing, precision,
gradient checkpointing, recomputed old log-probs, the distributed strategy (ddp or fsdp2), and how the
trainer is launched (in process, a persistent `accelerate launch`-ed group, or a launch per update;
machines and processes).

Apart from sections_loop.py (the other sections of the iteration loop, re-exported like this one by
sections.py) because it is the largest section, with the most keys; one strict pydantic model, every
field with its help text.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from thinking_seeds.config.section_base import _Section

__all__ = ["UpdateConfig"]


class UpdateConfig(_Section):
    lr: float = Field(1e-4, gt=0.0, lt=1.0, description="AdamW learning rate.")
    lr_warmup_steps: int = Field(
        0,
        ge=0,
        description="Ramp the learning rate linearly over the run's first this many optimizer steps (step n "
        "uses lr·n/N), as verl's optim.lr_warmup_steps: a fresh AdamW's first steps move every weight by about "
        "lr whatever its gradient's size, which is what the first updates of a small model feel most. The "
        "count is AdamW's own step counter, so a resumed or replayed run ramps the same. 0: constant lr.",
    )
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
        4096,
        ge=1,
        description="Token budget of a forward/backward instead of micro_batch_size sequences: each process's "
        "sequences sorted by length and cut so that a micro-batch's input holds at most this many tokens (padded "
        "layout: rows x (longest context + longest response); packed: the sum of its tokens; a longer sequence "
        "trains alone). The loss is normalised by the mini-batch's global counts, so the gradient is the same as "
        "with micro_batch_size (tested). The default, 4096, is half the padded default's largest tensor (64 "
        "sequences x (32 + 96) tokens), so memory never grows; sorted micro-batches compute less padding, and on "
        "a CPU small ones stay in cache: the tiny preset's update took 0.61-0.86x the padded time at 1024-4096 "
        "(bench/micro_batches.py; each preset sets its own). null: micro_batch_size sequences in the shuffled "
        "order, padded (the default of runs started before; they keep it).",
    )
    packed: bool = Field(
        False,
        description="With max_tokens_per_micro_batch: run each micro-batch as one row of concatenated sequences, "
        "positions restarting per sequence and no padding (transformers' packed-sequence masks: flash-attention's "
        "varlen kernels where flash-attn is installed and the forward runs bf16 on CUDA, chosen by the trainer and "
        "said in its log; else a block-diagonal mask on sdpa, where attention still spans the whole row).",
    )
    logprob_chunk_size: int | None = Field(
        0,
        ge=0,
        description="Tokens per chunk of the LM head when the update scores responses: log-probs and entropies "
        "are computed a chunk at a time and recomputed in the backward pass (engine/token_scores.py), so no "
        "(tokens x vocabulary) tensor is kept: ~1-2 bytes per (response token x vocabulary entry) instead of ~20. "
        "0: as many tokens as keep a chunk's fp32 logits within 8M entries (55 tokens at a 152k vocabulary; the "
        "whole micro-batch at the tiny presets' 39, which is then bitwise the plain path). None: the plain path "
        "(full logits). Gradients equal the plain path's to 1e-6 (tested).",
    )
    gradient_checkpointing: bool | None = Field(
        None,
        description="Recompute each decoder layer's activations in the backward pass instead of keeping them "
        "(transformers' gradient checkpointing): activation memory of a layer's input per token instead of the "
        "whole layer's, for ~30% more forward compute. None: on for models of 1B parameters or more (at 1.5B a "
        "token's activations are ~3 MB in bf16, so a few thousand tokens per micro-batch outgrow a GPU next to "
        "16 bytes per parameter of weights, gradients and AdamW), off below (where it only costs time).",
    )
    strategy: Literal["ddp", "fsdp2"] = Field(
        "ddp",
        description="How the accelerate launchers' processes share the model. ddp: every process holds the "
        "whole model, gradients and AdamW state, gradients all-reduced. fsdp2: torch's fully_shard per decoder "
        "layer and on the whole model (parameters, gradients and AdamW state sharded across processes; "
        "all-gather before each layer, reduce-scatter after its backward; bf16 all-gathers under "
        "update.mixed_precision=bf16). θ_k is read by rank 0 alone and broadcast shard by shard; θ_{k+1} is "
        "gathered to rank 0 for the engine (in its dtype) and, with the optimizer state, for a checkpoint (the same "
        "files as ddp). Needs a full fine-tune (no model.lora).",
    )
    mixed_precision: Literal["auto", "no", "bf16"] = Field(
        "auto",
        description="bf16: the update's forward runs under bf16 autocast (in process: torch.autocast; accelerate "
        "launcher: --mixed_precision bf16) with fp32 master weights and fp32 AdamW state (needs model.dtype=float32), "
        "the fp32 matmuls left on a CUDA GPU use TF32, and the engine generates with bf16 weights; no: everything in "
        "model.dtype, exact fp32 matmuls. auto (the default): bf16 when `device` puts the run on a CUDA GPU "
        "(device=cuda[:N], or auto with a GPU visible) and model.dtype=float32, else no; resolved when the run's "
        "config is written, so a run keeps its precision wherever it resumes (runs started before auto existed "
        "keep no).",
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
    gpu_ids: list[int] | None = Field(
        None,
        description="The trainer processes' GPUs on each machine (accelerate's --gpu_ids), one per process "
        "(update.num_processes of them, distinct). Unset: with one process the GPU of `device` (shared with "
        "the engine); with more, GPUs the engine does not use when there are enough, else the first "
        "num_processes GPUs. Ignored on the CPU and by launcher=in_process (the trainer runs on `device`).",
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
