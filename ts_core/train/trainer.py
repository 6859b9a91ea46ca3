"""The gradient update: rollouts with advantages in, θ_{k+1} (and its optimizer state) out.

The trainer never sees rewards, only advantages (prime-rl's split). It runs the same code in
process or under `accelerate launch` with N processes: each process takes every N-th sequence of
each mini-batch, and the loss is normalised by the *global* mini-batch token (or sequence) count,
multiplied by N because DDP averages gradients. So N processes compute the same gradient as one,
up to float summation order (tested). The statistics likewise: sums and counts are SUM-reduced and
maxima MAX-reduced once, at the end (algo/stats.py), so a logged mean is over every process's tokens.

    accelerate launch --num_processes 1 -m thinking_seeds.train.trainer --policy P --rollouts R --out O --config C

That command is one update (`update.launcher=accelerate_per_update`); the persistent trainer
(train/trainer_server.py, `update.launcher=accelerate`) keeps a `TrainState` between updates and
calls the same `update_state`, so both write the same θ_{k+1}.

This file holds the state (load, update, save) and the entry point; the parts it runs are
train/batch.py (the rollouts as a Batch), train/micro_batches.py (who trains on which sequences),
train/micro_loss.py (one micro-batch's forward and loss; train/packed_scoring.py its padding-free
forward), train/update_loop.py (the optimizer steps) and train/strategy.py (update.strategy: ddp, or
fsdp2's sharding and the full state gathered to save). Their names are re-exported here, where other
modules have always imported them.

Devices and precision: the model trains on `cfg.device` (in process) or the accelerator's device.
With `update.mixed_precision=bf16` the forward runs under bf16 autocast while the weights and the
AdamW state stay fp32 (the master copy); backward and the optimizer step run outside autocast.
θ_{k+1} is written from a CPU copy (the persistent trainer saves from the device: the same bytes).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from thinking_seeds.config import RunConfig, load_saved_config
from thinking_seeds.engine.attention import use_packed_attention
from thinking_seeds.engine.lora import load_policy
from thinking_seeds.engine.models import load_model, release_cached_memory, resolve_device
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.checkpoints import OPTIMIZER_NAME, save_checkpoint, verified
from thinking_seeds.store.optimizer_state import load_optimizer_state
from thinking_seeds.train.batch import Batch, load_batch
from thinking_seeds.train.memory_plan import CHECKPOINTING_FROM_PARAMS  # update.gradient_checkpointing=None
from thinking_seeds.train.micro_batches import schedule
from thinking_seeds.train.micro_loss import AGE_BUCKETS, age_bucket, autocast, loss_settings, micro_loss
from thinking_seeds.train.rollout_weights import correct_batch
from thinking_seeds.train.strategy import gathered, load_sharded, shard_fraction
from thinking_seeds.train.update_loop import make_optimizer, recompute_old_logprobs, train_on_batch

__all__ = [  # the names other modules import from here (re-exported from the files that hold them)
    "AGE_BUCKETS",
    "Batch",
    "TrainState",
    "age_bucket",
    "autocast",
    "load_batch",
    "load_state",
    "loss_settings",
    "make_optimizer",
    "micro_loss",
    "recompute_old_logprobs",
    "run_update",
    "schedule",
    "train_on_batch",
    "update_state",
]


@dataclass
class TrainState:
    """θ as the trainer holds it: the module, its tokenizer and AdamW, the reference model, the device.

    `run_update` builds one per update; the persistent trainer (train/trainer_server.py) keeps one
    between updates. `train_model`/`train_optimizer` are what `accelerator.prepare` returned (the
    DDP wrapper; the model itself in process), set by the first update: preparing once keeps one DDP
    wrapper per state instead of one per update.
    """

    model: Any
    tok: Any
    optimizer: torch.optim.Optimizer
    ref_model: Any
    device: torch.device
    world: int
    train_model: Any = None
    train_optimizer: Any = None
    # fsdp2, rank 0: the last update's unsharded CPU copy and its AdamW (strategy.gathered), what a
    # checkpoint is written from (train/resident.py); None under ddp, where `model` itself is whole.
    gathered: tuple[Any, Any] | None = None


def gradient_checkpointing(cfg: RunConfig, model) -> bool:
    """Whether the update recomputes activations: update.gradient_checkpointing, or by the model's size."""
    on = cfg.update.gradient_checkpointing
    if on is None:
        on = sum(p.numel() for p in model.parameters()) >= CHECKPOINTING_FROM_PARAMS
    return bool(on) and getattr(model, "supports_gradient_checkpointing", False)


def load_state(
    policy_dir: Path, cfg: RunConfig, ref_dir: Path | None = None, accelerator=None, policy=None
) -> TrainState:
    """θ_k (+ its optimizer state, + the reference model when kl_coef > 0), on the training device.

    `policy` lets an in-process caller pass an already loaded (model, tokenizer) to skip a load.
    """
    # In process: cfg.device; under accelerate: its device (prepare would move it too, but the
    # π_old recompute runs before prepare and must see the training device's numerics).
    device = accelerator.device if accelerator is not None else resolve_device(cfg.device)
    world = accelerator.num_processes if accelerator is not None else 1

    def for_training(model) -> None:
        model.train()
        model.config.use_cache = False
        if cfg.update.packed:  # flash-attention's variable-length kernels where they run (engine/attention.py)
            half = cfg.update.mixed_precision == "bf16" or cfg.model.dtype in ("bfloat16", "float16")
            use_packed_attention(model, device, half)
        if gradient_checkpointing(cfg, model):
            # non-reentrant: no input needs requires_grad (LoRA), and it nests with the head's own checkpoints
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    if cfg.update.strategy == "fsdp2" and accelerator is not None:
        # Rank 0 reads θ_k and its AdamW state once and broadcasts them shard by shard; the other ranks
        # never hold a full copy (strategy.load_sharded).
        model, tok, optimizer = load_sharded(
            policy_dir, cfg, device, world, accelerator.is_main_process, prepare=for_training
        )
    else:
        model, tok = policy if policy is not None else load_policy(policy_dir, cfg.model.dtype, cfg.model.lora)
        model.to(device)
        for_training(model)
        optimizer = make_optimizer(model, cfg)
        if policy is not None and (Path(policy_dir) / "manifest.json").is_file():
            verified(policy_dir)  # the in-memory policy skipped load_model: its optimizer state is checked here
        opt_path = Path(policy_dir) / OPTIMIZER_NAME
        if opt_path.exists():
            load_optimizer_state(optimizer, opt_path)  # torch moves the state to the parameters' device
    ref_model = load_model(ref_dir, cfg.model.dtype, device=device)[0] if cfg.loss.kl_coef > 0 else None
    return TrainState(model, tok, optimizer, ref_model, device, world)


def update_state(
    st: TrainState,
    rollouts_path: Path,
    out_root: Path | None,
    step: int,
    cfg: RunConfig,
    accelerator=None,
    keep=False,
    save: bool | None = None,
    handoff: bool = True,
) -> dict:
    """Train `st` on the rollouts and save it as `out_root/step_{step}` (None: no file); the metrics.

    keep=True (the persistent trainer): the weights stay on the training device and in train mode
    after the save, ready for the next update; otherwise θ_{k+1} is written from a CPU copy.
    fsdp2 gathers for rank 0 only what comes next (strategy.gathered): with `save` (default: out_root is
    given) the fp32 weights and AdamW, else with `handoff` the weights in the engine's dtype, else nothing.
    """
    t0 = time.perf_counter()
    # Seeded after the load, so an update from weights already in memory and one from weights just
    # read from disk start from the same generator state.
    torch.manual_seed(cfg.seed + step)
    model, tok, world = st.model, st.tok, st.world
    batch = load_batch(Path(rollouts_path))
    engine_diff: dict[str, float] = {}
    t_old = time.perf_counter()
    if cfg.update.recompute_old_logprobs:
        engine_logprobs = [list(r) for r in batch.old_logprobs]  # the engine's, before the trainer's replace them
        rank = accelerator.process_index if accelerator is not None else 0
        engine_diff = recompute_old_logprobs(model, batch, cfg, tok.pad_token_id, world, rank)
        engine_diff.update(
            correct_batch(batch, engine_logprobs, cfg.loss.rollout_correction, cfg.loss.rollout_correction_cap)
        )

    t_pre = time.perf_counter()
    if st.train_model is None:
        prepare = accelerator is not None and cfg.update.strategy == "ddp"  # fsdp2: sharded by load_state
        st.train_model, st.train_optimizer = (
            accelerator.prepare(model, st.optimizer) if prepare else (model, st.optimizer)
        )
    t1 = time.perf_counter()
    stats = train_on_batch(st.train_model, batch, cfg, tok.pad_token_id, st.train_optimizer, accelerator, st.ref_model)
    # Free the gradients now, not at the next update's first step: between updates the engine samples,
    # and on a shared GPU a model's worth of stale gradients is memory it cannot use.
    st.train_optimizer.zero_grad(set_to_none=True)
    if st.device.type == "cuda":
        torch.cuda.synchronize(st.device)  # so perf/fwd_bwd_s is the GPU's time, not the launch queue's
        stats.add("perf/cuda_max_memory_gib", torch.cuda.max_memory_allocated(st.device) / 2**30)
        release_cached_memory(st.device)  # the update's transient blocks, for the engine's turn
    t2 = time.perf_counter()
    # The one reduction (and host-device sync) of the update: sums and counts SUM, maxima MAX over
    # every process, so a mean is over the union of all processes' tokens (algo/stats.py).
    metrics = stats.metrics(across_processes=world > 1)
    metrics.update(engine_diff)  # gathered from every process's scores: the same numbers everywhere
    metrics["actor/lr"] = cfg.update.lr
    metrics["perf/num_processes"] = float(world)
    metrics["perf/param_shard_fraction"] = shard_fraction(model)  # 1/world under fsdp2, 1 under ddp

    t3 = time.perf_counter()
    model.eval()
    model.config.use_cache = True
    to_save, optimizer = model, st.optimizer
    if accelerator is not None:
        accelerator.wait_for_everyone()
        if cfg.update.strategy == "fsdp2":  # every rank sends its shards; rank 0 gets an unsharded CPU copy
            save = out_root is not None if save is None else save
            st.gathered = None
            if save or handoff:  # a replayed update gathers nothing; a hand-over alone, no AdamW, engine dtype
                dtype = None if save else getattr(torch, cfg.engine_dtype)
                main = accelerator.is_main_process
                to_save, optimizer = gathered(model, st.optimizer, cfg, main, with_optimizer=save, dtype=dtype)
                st.gathered = (to_save, optimizer)
        if not accelerator.is_main_process:
            if keep:
                model.train()
                model.config.use_cache = False
            return metrics
    if not keep and to_save is model:
        model.to("cpu")  # θ_{k+1} is written from a CPU copy (fp32 masters under mixed precision)
    # Timing split for bench/iteration.py: forward/backward + optimizer, saving (and loading, by run_update).
    metrics["perf/fwd_bwd_s"] = t2 - t1
    metrics["perf/load_s"] = t1 - t0  # the rollouts, the π_old recompute, accelerate's prepare
    # The π_old forward pass alone (model work, as verl's compute_log_prob; 0 without the recompute).
    metrics["perf/old_logprob_s"] = t_pre - t_old
    # keep=True on a GPU: save_pretrained and the optimizer state copy tensors to the host themselves
    # (same bytes), without moving the DDP-wrapped module off its device.
    if out_root is not None:  # None: θ_{k+1} stays in memory (train/resident.py writes checkpoints)
        save_checkpoint(
            to_save,
            tok,
            Path(out_root),
            step,
            extra={"metrics": metrics, "config_hash": cfg.config_hash()},
            optimizer=optimizer,
            overwrite=True,
        )
    metrics["perf/save_s"] = time.perf_counter() - t3
    if keep:
        model.train()
        model.config.use_cache = False
    return metrics


def run_update(
    policy_dir: Path,
    rollouts_path: Path,
    out_root: Path,
    step: int,
    cfg: RunConfig,
    ref_dir: Path | None = None,
    accelerator=None,
    policy=None,
) -> dict:
    """Load θ_k (+ optimizer state), train on the rollouts, save θ_{k+1} as `out_root/step_{step}`.

    `policy` lets an in-process caller pass an already loaded (model, tokenizer) to skip a load.
    """
    t0 = time.perf_counter()
    st = load_state(policy_dir, cfg, ref_dir, accelerator, policy)
    load_s = time.perf_counter() - t0
    metrics = update_state(st, rollouts_path, out_root, step, cfg, accelerator)
    if "perf/load_s" in metrics:  # the main process: the timing split of bench/iteration.py
        metrics["perf/load_s"] += load_s
    return metrics


def main() -> None:
    """Entry point for `accelerate launch -m thinking_seeds.train.trainer`."""
    from accelerate import Accelerator

    ap = argparse.ArgumentParser(description="One Thinking Seeds update step (run under accelerate launch).")
    ap.add_argument("--policy", type=Path, required=True, help="checkpoint dir of θ_k")
    ap.add_argument("--rollouts", type=Path, required=True, help="rollouts Parquet with advantages")
    ap.add_argument("--out-root", type=Path, required=True, help="dir that receives step_XXXXXX of θ_{k+1}")
    ap.add_argument("--step", type=int, required=True)
    ap.add_argument("--config", type=Path, required=True, help="the run's config.yaml")
    ap.add_argument("--ref", type=Path, default=None, help="reference model (for kl_coef > 0)")
    ap.add_argument("--metrics-out", type=Path, required=True)
    ap.add_argument("--cpu", action="store_true", help="force CPU (gloo) even if a GPU is visible")
    a = ap.parse_args()
    cfg = load_saved_config(a.config, check_outside=False)  # the trainer never imports a reward fn
    # Mixed precision comes from the launcher (--mixed_precision bf16, see update_launcher.accelerate_command);
    # the forward's explicit autocast (trainer.autocast) is the same bf16 autocast, so both agree.
    acc = Accelerator(cpu=a.cpu or cfg.device == "cpu")
    metrics = run_update(a.policy, a.rollouts, a.out_root, a.step, cfg, ref_dir=a.ref, accelerator=acc)
    if acc.is_main_process:
        atomic_write(a.metrics_out, json.dumps(metrics))  # the launcher reads it once the process has exited
    # Leave together and take the process group down: a gloo process that exits with the group
    # alive can abort ("terminate called without an active exception"), failing the update.
    acc.wait_for_everyone()
    acc.end_training()


if __name__ == "__main__":
    main()
