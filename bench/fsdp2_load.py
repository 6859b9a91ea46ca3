"""fsdp2's load: each rank's peak host memory when rank 0 alone reads θ_k and its AdamW state and
broadcasts them shard by shard (train/strategy.load_sharded), against every rank reading them whole
first (what the trainer did before: `_every_rank_reads`), on 2 gloo processes.

    .venv/bin/python bench/fsdp2_load.py --hidden 1024 --layers 8 --vocab 32000

A random Llama of the given shape is saved with one AdamW step's state. Each mode runs in fresh processes
(peak RSS per process: VmHWM, reset at its start), and reports each rank's peak and what it holds after the load.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp


def _status_mib(key: str) -> float:
    line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith(key + ":"))
    return int(line.split()[1]) / 1024


def _peak_mib() -> float:
    """This process's peak resident memory (VmHWM), MiB."""
    return _status_mib("VmHWM")


def _rss_mib() -> float:
    """This process's resident memory now (VmRSS), MiB."""
    return _status_mib("VmRSS")


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


def _rank(rank: int, ckpt: str, port: int, mode: str, out: str) -> None:
    import torch.distributed as dist

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    from thinking_seeds.config import load_config
    from thinking_seeds.train import strategy

    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM): the spawn inherited the parent's
    before = _peak_mib()
    cfg = load_config("tiny", ["update.launcher=accelerate", "update.num_processes=2", "update.strategy=fsdp2"])
    if mode == "every rank reads":
        model, opt = _every_rank_reads(Path(ckpt), cfg)
    else:
        model, _, opt = strategy.load_sharded(Path(ckpt), cfg, torch.device("cpu"), 2, rank == 0)
    peak = _peak_mib()
    gc.collect()
    held_rss = _rss_mib()
    local = [p.to_local() for p in model.parameters()]
    local += [t.to_local() for s in opt.state.values() for t in s.values() if t.dim()]
    held = sum(t.numel() * t.element_size() for t in local) / 2**20
    report = dict(peak_mib=peak, before_mib=before, after_mib=held_rss, shard_mib=held)
    Path(out, f"{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    a = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    from thinking_seeds.engine.models import char_tokenizer
    from thinking_seeds.store.checkpoints import OPTIMIZER_NAME
    from thinking_seeds.store.optimizer_state import save_optimizer_state

    root = Path(tempfile.mkdtemp(prefix="fsdp2-load-"))
    tok = char_tokenizer("0123456789+-=")
    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.hidden * 11 // 4,
        num_hidden_layers=a.layers,
        num_attention_heads=a.hidden // 64,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, len(tok), (1, 8))
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    model.save_pretrained(root / "ckpt")
    tok.save_pretrained(root / "ckpt")
    save_optimizer_state(opt, root / "ckpt" / OPTIMIZER_NAME)
    params = sum(p.numel() for p in model.parameters())
    del model, opt
    mib = params * 4 / 2**20
    print(f"{params / 1e6:.0f}M parameters: weights {mib:.0f} MiB, AdamW {2 * mib:.0f} MiB (fp32)")
    for mode in ("every rank reads", "rank 0 reads, broadcasts"):
        out = root / mode.replace(" ", "_").replace(",", "")
        out.mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_rank, args=(str(root / "ckpt"), port, mode, str(out)), nprocs=2, join=True)
        for r in range(2):
            m = json.loads((out / f"{r}.json").read_text())
            print(
                f"{mode:26s} rank {r}: RSS at start {m['before_mib']:4.0f} MiB, peak {m['peak_mib']:5.0f}, "
                f"after the load {m['after_mib']:5.0f}; "
                f"its shard of weights + AdamW {m['shard_mib']:6.0f} MiB"
            )


if __name__ == "__main__":
    main()
