"""How the trainer's processes share the model: `update.strategy` ddp (accelerate's prepare: a DDP
wrapper, every process holding everything) or fsdp2 (torch's `fully_shard`: parameters, gradients
and AdamW state split across the processes).

Why not accelerate's FSDP2 plugin: `Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(
fsdp_version=2))` runs DDP on the CPU -- accelerate (1.15) only turns the GPU-like distributed types
into FSDP, MULTI_CPU stays MULTI_CPU and `prepare` returns a DistributedDataParallel, silently. torch's
own `fully_shard` works on gloo (all-gather, reduce-scatter), so the trainer calls it directly, on the
CPU and on GPUs alike: one code path, the one the 2-process CPU test checks against DDP
(tests/e2e/test_fsdp2.py). `accelerate launch` still starts the processes and their group.

Sharding wraps every decoder layer (the model's `_no_split_modules` classes) and then the whole
model, as accelerate's transformer-based wrap policy does; each layer's parameters are all-gathered
before its forward and its gradients reduce-scattered (averaged, as DDP's all-reduce is) after its
backward. The AdamW state is built over the shards and loaded from the checkpoint's full state.

θ_{k+1} is saved from full state dicts gathered to rank 0's CPU (`gathered`): an unsharded copy of
the model and of AdamW there, written by the same `save_checkpoint` as DDP's, so the files, the
resume and the engine's handoff do not know which strategy trained them.
"""

from __future__ import annotations

import torch

from thinking_seeds.config import RunConfig


def decoder_layers(model) -> list[torch.nn.Module]:
    """The model's repeated blocks (transformers names their classes in `_no_split_modules`)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"update.strategy=fsdp2: no decoder layers found in {type(model).__name__} (its _no_split_modules: "
            f"{sorted(names)}); use update.strategy=ddp for this model"
        )
    return layers


def shard_fraction(model) -> float:
    """The share of the model's parameters this process holds (a DTensor's local shard under fsdp2)."""
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    full = sum(p.numel() for p in model.parameters())
    return local / max(1, full)


def _names(model) -> list[str]:
    """The trainable parameters' names, in the order make_optimizer passes them to AdamW."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _by_name(osd: dict, names: list[str]) -> dict:
    """optimizer.state_dict() (parameters by index) -> the same state keyed by parameter name."""
    return {
        "state": {names[i]: s for i, s in osd["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in osd["param_groups"]],
    }


def _by_index(osd: dict, names: list[str]) -> dict:
    index = {n: i for i, n in enumerate(names)}
    return {
        "state": {index[n]: s for n, s in osd["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in osd["param_groups"]],
    }


def shard(model, optimizer: torch.optim.Optimizer, cfg: RunConfig, device: torch.device, world: int):
    """fully_shard `model` over the `world` processes and return (model, AdamW over its shards), the
    AdamW state of `optimizer` (over the unsharded model) carried over."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from thinking_seeds.train.update_loop import make_optimizer

    names = _names(model)
    full_osd = _by_name(optimizer.state_dict(), names)
    mesh = init_device_mesh(device.type, (world,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the rest: embeddings, final norm, LM head (tied weights included)
    sharded_opt = make_optimizer(model, cfg)
    if full_osd["state"]:  # θ_0 has no optimizer state yet
        set_optimizer_state_dict(model, sharded_opt, full_osd, options=StateDictOptions(full_state_dict=True))
    return model, sharded_opt


def gathered(model, optimizer: torch.optim.Optimizer, cfg: RunConfig, is_main: bool):
    """On rank 0: an unsharded CPU copy of the sharded `model` and an AdamW over it holding the full
    optimizer state; elsewhere (None, None). A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    from transformers import AutoModelForCausalLM

    from thinking_seeds.train.update_loop import make_optimizer

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)  # only rank 0 receives the tensors
    msd, osd = get_state_dict(model, optimizer, options=opts)
    if not is_main:
        return None, None
    with torch.device("meta"):
        copy = AutoModelForCausalLM.from_config(model.config, dtype=next(iter(msd.values())).dtype)
    copy.load_state_dict(msd, strict=True, assign=True)
    copy.tie_weights()  # assign=True replaced the shared tensor of tied embeddings with two
    copy.generation_config = model.generation_config
    copy_opt = make_optimizer(copy, cfg)
    if osd["state"]:
        copy_opt.load_state_dict(_by_index(osd, _names(copy)))
    return copy, copy_opt
