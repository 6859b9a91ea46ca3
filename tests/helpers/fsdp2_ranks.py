"""The ranks of tests/unit/test_fsdp2_strategy.py: two gloo processes (torch.multiprocessing.spawn) that
load a checkpoint with train/strategy.py, train one step and gather it back; each rank writes what it saw
to `out/rank{r}.pt` for the test process to compare."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def _batch(vocab: int, rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randint(2, vocab, (2, 12), generator=g)


def run_rank(rank: int, world: int, ckpt: str, out: str, port: int, cases: list[tuple[str, list[str]]]) -> None:
    """Each case (mode, config overrides) in turn, in one process group (one start-up for them all)."""
    import torch.distributed as dist

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for i, (mode, sets) in enumerate(cases):
            torch.save(_case(rank, world, ckpt, mode, sets), Path(out) / f"case{i}-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _adam_by_name(strategy, model, opt) -> dict:
    params = opt.param_groups[0]["params"]
    names = strategy._names(model)
    return {n: {k: v.clone() for k, v in opt.state[p].items()} for n, p in zip(names, params, strict=True)}


def _every_rank_reads(ckpt: Path, cfg):
    """The load before strategy.load_sharded (as of commit ec81cb1): every rank reads the whole checkpoint
    and its AdamW state, shards the model, and takes its part of the full optimizer state it holds."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from thinking_seeds.engine.lora import load_policy
    from thinking_seeds.store.optimizer_state import load_optimizer_state
    from thinking_seeds.train import strategy
    from thinking_seeds.train.update_loop import make_optimizer

    model, _ = load_policy(ckpt, cfg.model.dtype)
    model.train()
    optimizer = make_optimizer(model, cfg)
    load_optimizer_state(optimizer, ckpt / "optimizer.safetensors")
    full_osd = strategy._by_name(optimizer.state_dict(), strategy._names(model))
    mesh = init_device_mesh("cpu", (2,))
    for layer in strategy.decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sharded = make_optimizer(model, cfg)
    set_optimizer_state_dict(model, sharded, full_osd, options=StateDictOptions(full_state_dict=True))
    return model, sharded


def _case(rank: int, world: int, ckpt: str, mode: str, sets: list[str]) -> dict:
    """mode: "meta" (load_sharded: rank 0 reads, the others broadcast into meta parameters) or "full"
    (`_every_rank_reads`: the path before load_sharded)."""
    import thinking_seeds.engine.lora as lora

    real_load = lora.load_policy
    try:
        from thinking_seeds.config import load_config
        from thinking_seeds.train import strategy

        cfg = load_config(
            "tiny", ["update.launcher=accelerate", "update.num_processes=2", "update.strategy=fsdp2", *sets]
        )
        device = torch.device("cpu")
        report: dict = {}
        if mode == "full":  # every rank holds the whole model first
            model, opt = _every_rank_reads(Path(ckpt), cfg)
        else:
            if rank != 0:  # a rank other than 0 must never read the weights

                def refuse(*a, **k):
                    raise AssertionError("rank != 0 loaded the full model")

                lora.load_policy = refuse
            seen = []  # whether the model's parameters were all on meta when it was prepared, before sharding

            def prepare(m):
                seen.append(all(p.is_meta for p in m.parameters()))

            model, tok, opt = strategy.load_sharded(Path(ckpt), cfg, device, world, rank == 0, prepare=prepare)
            report["meta_before_shard"] = seen[0]
        report["tied"] = model.lm_head.weight is model.model.embed_tokens.weight
        from thinking_seeds.engine.token_scores import supports_head_scores

        report["chunked_head"] = supports_head_scores(model)  # fully_shard's class keeps a plain head
        report["fraction"] = strategy.shard_fraction(model)
        report["opt_steps"] = sorted(float(s["step"]) for s in opt.state.values()) if opt.state else []
        loaded, loaded_opt = strategy.gathered(model, opt, cfg, rank == 0)  # what the load put in place
        if rank == 0:
            report["loaded_adam"] = _adam_by_name(strategy, loaded, loaded_opt)
        dtypes = []
        hook = model.model.layers[0].mlp.down_proj.register_forward_pre_hook(
            lambda m, a: dtypes.append(m.weight.dtype)  # the all-gathered (unsharded) parameter's dtype
        )
        model.train()
        x = _batch(model.config.vocab_size, rank)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.update.mixed_precision == "bf16"):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        hook.remove()
        report["compute_dtype"] = str(dtypes[0])
        full, full_opt = strategy.gathered(model, opt, cfg, rank == 0)
        light, none_opt = strategy.gathered(model, opt, cfg, rank == 0, with_optimizer=False, dtype=torch.bfloat16)
        if rank == 0:
            report["weights"] = {k: v.clone() for k, v in full.state_dict().items()}
            report["adam"] = _adam_by_name(strategy, full, full_opt)
            report["light"] = {k: v.clone() for k, v in light.state_dict().items()}
            report["light_opt"] = none_opt
        return report
    finally:
        lora.load_policy = real_load
