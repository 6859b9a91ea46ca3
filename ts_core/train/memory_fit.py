"""Whether a run's memory plan (train/memory_plan.py) fits the devices it is given, and if not, the one
line that says which key to change: the first change, in a fixed order, whose plan fits (fewer evaluation
samples where the evaluation's responses are most of it, sharding the trainer over more GPUs, gradient
checkpointing, a smaller micro-batch), else what remains to say (give the engine its own GPU, LoRA, the
KV cache). Pure: the capacities come from the caller
(train/memory_check.py on this machine, `ts plan --gpus` for another).
"""

from __future__ import annotations

import math

from thinking_seeds.config import RunConfig
from thinking_seeds.train.memory_plan import (
    PROMPT_TOKENS_DEFAULT,
    ModelShape,
    ProcessPlan,
    device_totals,
    gib,
    plan_processes,
)

__all__ = ["GPU_MARGIN", "refusal", "usable"]

# The share of a GPU a plan may not use: the CUDA caching allocator reserves more than the tensors alive
# (fragmentation: blocks split and cached per stream and size class; 5-15% in PyTorch's own notes and what
# nvidia-smi shows beside max_memory_allocated), and NCCL and cuBLAS take workspaces beyond the CUDA context
# the plan counts per process. A plan above (1 - GPU_MARGIN) of the card is refused: a 7B fsdp2 x 8 plan at
# 78.5 of 80 GiB would not have run.
GPU_MARGIN = 0.10


def usable(device: str, capacity: float) -> float:
    """What a plan may use of `device`'s capacity: all of the host's RAM (the OS and swap decide the rest),
    a GPU less GPU_MARGIN."""
    return capacity * (1 - GPU_MARGIN) if device.startswith("cuda") else capacity


def _with(cfg: RunConfig, **update) -> RunConfig:
    """cfg with some update.* keys changed (no validation: a what-if for the advice)."""
    return cfg.model_copy(update={"update": cfg.update.model_copy(update=update)})


def _fits(shape, cfg, gpus, capacities, prompt_tokens) -> bool:
    totals = device_totals(plan_processes(shape, cfg, gpus, prompt_tokens))
    return all(t <= usable(d, capacities[d]) for d, t in totals.items() if d in capacities)


def _advice(shape: ModelShape, cfg: RunConfig, on: list[ProcessPlan], gpus: int, capacities, prompt_tokens) -> str:
    """The key to change for a device that overflows: the first change (in this order) whose plan fits."""
    u = cfg.update
    full = cfg.model.lora is None
    responses = sum(p.item("evaluation responses") for p in on)
    if responses > 0.5 * sum(p.peak for p in on):  # the evaluation's prompts × samples responses
        e = cfg.eval
        for smaller in sorted({max(1, e.samples // 2**i) for i in range(1, 17)}, reverse=True):
            what = cfg.model_copy(update={"eval": e.model_copy(update={"samples": smaller})})
            if smaller < e.samples and _fits(shape, what, gpus, capacities, prompt_tokens):
                return f"lower eval.samples to {smaller} (from {e.samples}) or eval.prompts (all held until scored)"
        return "lower eval.prompts and eval.samples (an evaluation holds all its prompts × samples responses)"
    if on[0].device == "cpu" and gpus:  # a GPU run's host memory: the policies handed over to the engine
        return "use a machine with more RAM, or update.launcher=in_process (the engine takes θ in process)"
    if full and gpus > 1:  # shard the trainer's 16 bytes per parameter over more GPUs
        for n in range(2 if u.strategy == "ddp" else u.num_processes + 1, gpus + 1):
            what = _with(cfg, strategy="fsdp2", num_processes=n, launcher="accelerate")
            if _fits(shape, what, gpus, capacities, prompt_tokens):
                return f"set update.strategy=fsdp2 with update.num_processes={n} (or model.lora)"
    trainers = [p for p in on if p.role.startswith(("trainer", "pipeline (engine + trainer)"))]
    cap = usable(on[0].device, capacities[on[0].device])
    states = max((p.item("weights") + p.item("gradients") + p.item("AdamW") for p in trainers), default=0.0)
    if full and states > 0.9 * cap:  # weights, gradients and AdamW alone leave no room
        if not gpus:  # trainer processes on one host share its memory: sharding does not help there
            return "set model.lora (no gradients or AdamW for the base weights), or use a machine with more RAM"
        n = math.ceil(states * (u.num_processes if u.strategy == "fsdp2" else 1) / (0.6 * cap))
        return f"set model.lora, or update.strategy=fsdp2 with update.num_processes={n} on {n} GPUs"
    if not u.gradient_checkpointing:
        if _fits(shape, _with(cfg, gradient_checkpointing=True), gpus, capacities, prompt_tokens):
            return "set update.gradient_checkpointing=true"
    key = "max_tokens_per_micro_batch" if u.max_tokens_per_micro_batch is not None else "micro_batch_size"
    now = getattr(u, key)
    for smaller in sorted({max(1, now // 2**i) for i in range(1, 16)}, reverse=True):
        if smaller < now and _fits(shape, _with(cfg, **{key: smaller}), gpus, capacities, prompt_tokens):
            return f"lower update.{key} to {smaller} (from {now})"
    roles = {p.role for p in on}
    if "pipeline (engine)" in roles and any(r.startswith("trainer") for r in roles):
        return "give the engine a GPU of its own (device=cuda:N, N past the trainer's GPUs)"
    if full:
        return "set model.lora (no gradients or AdamW for the base weights)"
    return "lower rollout.batch_size (the engine's KV cache) or use a larger device"


def refusal(
    shape: ModelShape,
    cfg: RunConfig,
    capacities: dict[str, float],
    gpus: int,
    prompt_tokens: int = PROMPT_TOKENS_DEFAULT,
) -> str | None:
    """One line naming the key to change when a device's plan exceeds its capacity (`capacities`: device ->
    bytes, 'cpu' for host memory; devices not listed are not checked); None when everything fits."""
    processes = plan_processes(shape, cfg, gpus, prompt_tokens)
    for dev, total in device_totals(processes).items():
        cap = capacities.get(dev)
        if cap is None or total <= usable(dev, cap):
            continue
        on = [p for p in processes if p.device == dev]
        items: dict[str, float] = {}
        for p in on:
            for name in p.phases.get(p.peak_phase, []):
                items[name] = items.get(name, 0.0) + p.item(name)
        top = ", ".join(f"{n} {gib(b):.1f}" for n, b in sorted(items.items(), key=lambda kv: -kv[1])[:3])
        where = "host memory" if dev == "cpu" else dev
        room = f"{gib(cap):.1f} GiB"
        if usable(dev, cap) < cap:
            room += f", {gib(usable(dev, cap)):.1f} usable ({GPU_MARGIN:.0%} kept for the CUDA caching allocator)"
        return (
            f"memory: the run needs {gib(total):.1f} GiB on {where}, which has {room} "
            f"({' + '.join(sorted({p.role for p in on}))}; largest: {top} GiB); "
            f"{_advice(shape, cfg, on, gpus, capacities, prompt_tokens)}; `ts plan` shows the whole plan"
        )
    return None
