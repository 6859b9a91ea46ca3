"""How the trainer's processes share the model: `update.strategy` ddp (accelerate's prepare: a DDP
wrapper, every process holding everything) or fsdp2 (torch's `fully_shard`: parameters, gradients
and AdamW state split across the processes).

Why not accelerate's FSDP2 plugin: `Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(
fsdp_version=2))` runs DDP on the CPU -- accelerate (1.15) only turns the GPU-like distributed types
into FSDP, MULTI_CPU stays MULTI_CPU and `prepare` returns a DistributedDataParallel, silently. torch's
own `fully_shard` works on gloo (all-gather, reduce-scatter), so the trainer calls it directly, on the
CPU and on GPUs alike: one code path, the one the 2-process CPU test checks against DDP
(tests/e2e/test_fsdp2.py; the pieces: tests/unit/test_fsdp2_strategy.py).

Loading (`load_sharded`): θ_k is read ONCE, by rank 0; every other rank builds the model with its
parameters on the meta device (no memory), all ranks shard it, and rank 0 broadcasts each tensor
(torch.distributed.checkpoint's set_model_state_dict with broadcast_from_rank0): each rank keeps only
its shard. The AdamW state goes the same way (only rank 0 reads optimizer.safetensors). At 7B on 8
GPUs that is one host copy of ~91 GB (fp32 weights + AdamW) instead of eight.

Sharding wraps every decoder layer (the model's `_no_split_modules` classes) and then the whole
model, as accelerate's transformer-based wrap policy does; each layer's parameters are all-gathered
before its forward and its gradients reduce-scattered (averaged, as DDP's all-reduce is) after its
backward. Under update.mixed_precision=bf16 the all-gathers carry bf16 parameters (MixedPrecisionPolicy:
half the bytes; the gradients are reduced in fp32 into the fp32 shards AdamW steps).

Gathering (`gathered`): only what the job needs reaches rank 0's host. A checkpoint (its step is saved)
gathers the fp32 weights and the AdamW state; a hand-over to the engine alone gathers the weights in
the engine's dtype (bf16 under mixed precision: half the bytes), no optimizer state; an update that is
neither (a replayed one) gathers nothing. The copy is written by the same `save_checkpoint` as DDP's, so
the files, the resume and the engine's hand-over do not know which strategy trained them.
"""

from __future__ import annotations

from pathlib import Path

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


def mixed_precision_policy(cfg: RunConfig):
    """fully_shard's precision: bf16 all-gathers (and compute parameters) with fp32 gradient reduction under
    update.mixed_precision=bf16; None (the parameters' own dtype) otherwise."""
    if cfg.update.mixed_precision != "bf16":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def empty_model(policy_dir: Path, dtype: str):
    """The checkpoint's architecture with its parameters on the meta device (no memory) and its buffers
    (rotary frequencies: not in the state dict) computed on the CPU, and its tokenizer."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    policy_dir = Path(policy_dir)
    config = AutoConfig.from_pretrained(policy_dir, local_files_only=True)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.tie_weights()  # init_empty_weights re-creates every registered parameter: tied embeddings came apart
    if (policy_dir / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(policy_dir, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(policy_dir, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return model, tok


def load_sharded(policy_dir: Path, cfg: RunConfig, device: torch.device, world: int, is_main: bool, prepare=None):
    """(model sharded over the `world` processes, tokenizer, AdamW over the shards) of θ_k: rank 0 reads the
    checkpoint (verified) and its optimizer state, the others only build the architecture on meta, and the
    tensors are broadcast from rank 0 shard by shard. `prepare(model)` runs on every rank before sharding
    (train mode, gradient checkpointing). A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from thinking_seeds.engine.lora import load_policy
    from thinking_seeds.store.checkpoints import OPTIMIZER_NAME
    from thinking_seeds.store.optimizer_state import load_optimizer_state
    from thinking_seeds.train.update_loop import make_optimizer

    opt_path = Path(policy_dir) / OPTIMIZER_NAME
    has_optimizer = opt_path.exists()  # the runs directory is shared: every rank sees the same answer
    full_sd: dict = {}
    full_osd: dict = {}
    if is_main:
        model, tok = load_policy(policy_dir, cfg.model.dtype)  # the only full copy
        if has_optimizer:
            full_opt = make_optimizer(model, cfg)
            load_optimizer_state(full_opt, opt_path)
            full_osd = _by_name(full_opt.state_dict(), _names(model))
            del full_opt
        full_sd = model.state_dict()  # the full tensors, kept for the broadcast after fully_shard replaces them
    else:
        model, tok = empty_model(policy_dir, cfg.model.dtype)
    if prepare is not None:
        prepare(model)
    mesh = init_device_mesh(device.type, (world,))
    policy = mixed_precision_policy(cfg)
    kw = {"mp_policy": policy} if policy is not None else {}
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, **kw)
    fully_shard(model, mesh=mesh, **kw)  # the rest: embeddings, final norm, LM head (tied weights included)
    if not is_main:
        # Memory for this rank's shards only, filled by the broadcast below. In place (tied embeddings stay one
        # parameter); to_empty also empties the buffers, which hold computed values (rotary frequencies): kept.
        buffers = {name: b.clone() for name, b in model.named_buffers()}
        model.to_empty(device=device)
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
    broadcast = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, full_sd, options=broadcast)
    del full_sd
    optimizer = make_optimizer(model, cfg)
    if has_optimizer:  # θ_0 has no optimizer state yet
        broadcast_optimizer_state(model, optimizer, full_osd, is_main)
    del full_osd
    _return_freed_memory()
    return model, tok, optimizer


def broadcast_optimizer_state(model, optimizer: torch.optim.Optimizer, full_osd: dict, is_main: bool) -> None:
    """AdamW's state from rank 0's full copy (`full_osd`, keyed by parameter name; {} elsewhere) into the
    optimizer over the shards, one tensor at a time: each is scattered from rank 0 into the parameter's
    placements (distribute_tensor), so a rank holds its shard and at most one full tensor in flight.
    torch's set_optimizer_state_dict first initialises a zero state for every parameter (a step on zero
    gradients) and then loads the given one: twice the AdamW shard, plus the gradients, at once (measured
    ~550 MiB above the shard at 136M on rank 1, where the shard is 517 MiB). The hyperparameters of the
    param groups (lr, betas, weight decay) are rank 0's, as the checkpoint's load gave them."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, distribute_tensor

    box = [None]
    if is_main:
        groups = [{k: v for k, v in g.items() if k != "params"} for g in full_osd["param_groups"]]
        layout = {
            name: {k: (tuple(v.shape), v.dtype) if torch.is_tensor(v) and v.dim() else v for k, v in st.items()}
            for name, st in full_osd["state"].items()
        }
        box = [(groups, layout)]
    dist.broadcast_object_list(box, src=0)
    groups, layout = box[0]
    for group, saved in zip(optimizer.param_groups, groups, strict=True):
        group.update(saved)
    params = dict(model.named_parameters())
    for name, entries in layout.items():
        p = params[name]
        state = {}
        for key, value in entries.items():
            # A scalar (AdamW's step), sent in the layout: a copy, as rank 0's is a view of the whole memory-mapped
            # optimizer file, which it would keep mapped for good (measured: +1 GB of RSS at 136M parameters).
            if not isinstance(value, tuple):
                state[key] = value.clone() if torch.is_tensor(value) else value
                continue
            shape, dtype = value
            full = full_osd["state"][name][key] if is_main else torch.empty(shape, dtype=dtype)
            if isinstance(p, DTensor):
                state[key] = distribute_tensor(full.to(p.device), p.device_mesh, p.placements, src_data_rank=0)
            else:  # not sharded: every rank keeps the whole tensor
                full = full.to(p.device).clone()
                dist.broadcast(full, src=0)
                state[key] = full
            del full
        optimizer.state[p] = state


def _return_freed_memory() -> None:
    """Hand the host memory the load freed back to the system (glibc keeps freed heap for the process:
    measured ~230 MB on a non-zero rank at 136M parameters), so the engine beside the trainer can use it."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def gathered(
    model,
    optimizer: torch.optim.Optimizer,
    cfg: RunConfig,
    is_main: bool,
    with_optimizer: bool = True,
    dtype: torch.dtype | None = None,
):
    """On rank 0: an unsharded CPU copy of the sharded `model`, in `dtype` (None: its own), and, with
    `with_optimizer`, an AdamW over it holding the full optimizer state (else None); elsewhere (None, None).
    A collective: every rank calls it with the same arguments."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM

    from thinking_seeds.train.update_loop import make_optimizer

    own = next(model.parameters()).dtype
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)  # only rank 0 receives the tensors
    if dtype is None or dtype == own:
        msd = get_model_state_dict(model, options=opts)
    else:  # cast each shard before its all-gather: the bytes on the wire and on rank 0's host are dtype's
        msd = {}
        for name, t in model.state_dict().items():
            full = t.to(dtype).full_tensor() if isinstance(t, DTensor) else t.to(dtype)
            if is_main:
                msd[name] = full.cpu()
            del full
    osd = get_optimizer_state_dict(model, optimizer, options=opts) if with_optimizer else None
    if not is_main:
        return None, None
    with torch.device("meta"):
        copy = AutoModelForCausalLM.from_config(model.config, dtype=next(iter(msd.values())).dtype)
    copy.load_state_dict(msd, strict=True, assign=True)
    copy.tie_weights()  # assign=True replaced the shared tensor of tied embeddings with two
    copy.generation_config = model.generation_config
    if osd is None:
        return copy, None
    copy_opt = make_optimizer(copy, cfg)
    if osd["state"]:
        copy_opt.load_state_dict(_by_index(osd, _names(copy)))
    return copy, copy_opt
