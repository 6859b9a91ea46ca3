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

Devices and precision: the model trains on `cfg.device` (in process) or the accelerator's device.
With `update.mixed_precision=bf16` the forward runs under bf16 autocast while the weights and the
AdamW state stay fp32 (the master copy); backward and the optimizer step run outside autocast.
θ_{k+1} is written from a CPU copy (the persistent trainer saves from the device: the same bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from thinking_seeds.algo.losses import LossInputs, LossSettings, compute_policy_loss
from thinking_seeds.algo.stats import Stats
from thinking_seeds.config import RunConfig, load_saved_config
from thinking_seeds.engine.lora import load_policy
from thinking_seeds.engine.models import load_model, resolve_device
from thinking_seeds.engine.scoring import score_responses
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.checkpoints import OPTIMIZER_NAME, save_checkpoint
from thinking_seeds.store.optimizer_state import load_optimizer_state
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.schemas import ROLLOUT_SCHEMA


@dataclass
class Batch:
    """Per-sequence training data, as Python lists (small; tensors are built per micro-batch)."""

    contexts: list[list[int]]
    responses: list[list[int]]
    old_logprobs: list[list[float]]
    behaviour_logprobs: list[list[float]]
    prefix_len: list[int]
    seeded: list[bool]
    advantages: list[float]
    source_age: list[int]  # iterations between the seed's writer and θ_k; -1 for on-policy samples

    def __len__(self) -> int:
        return len(self.responses)

    def select(self, idx: list[int]) -> Batch:
        return Batch(*[[getattr(self, f)[i] for i in idx] for f in self.__dataclass_fields__])


def load_batch(rollouts_path: Path) -> Batch:
    t = read_table(rollouts_path, ROLLOUT_SCHEMA).to_pydict()
    if any(a is None for a in t["advantage"]):
        raise ValueError(f"{rollouts_path} has rows without an advantage: run the verify stage first")
    return Batch(
        contexts=t["prompt_token_ids"],
        responses=t["token_ids"],
        old_logprobs=t["old_logprobs"],
        behaviour_logprobs=t["behaviour_logprobs"],
        prefix_len=t["prefix_len"],
        seeded=[k != "on_policy" for k in t["kind"]],
        advantages=t["advantage"],
        source_age=[
            -1 if st is None or st < 0 else it - st for it, st in zip(t["iteration"], t["source_step"], strict=True)
        ],
    )


def loss_settings(cfg: RunConfig, **global_counts) -> LossSettings:
    loss, p = cfg.loss, cfg.prefix
    return LossSettings(
        clip_ratio_low=loss.clip_ratio_low,
        clip_ratio_high=loss.clip_ratio_high,
        clip_ratio_c=loss.clip_ratio_c,
        prefix_loss=p.loss,
        shaped_gamma=p.shaped_gamma,
        cap=p.cap,
        loss_agg_mode=loss.loss_agg_mode,
        entropy_coeff=loss.entropy_coeff,
        kl_coef=loss.kl_coef,
        kl_type=loss.kl_type,
        seq_norm_len=float(cfg.rollout.max_new_tokens),
        **global_counts,
    )


def _padded(rows: list[list[float]], T: int, device) -> torch.Tensor:
    out = torch.zeros((len(rows), T), dtype=torch.float32)
    for i, r in enumerate(rows):
        n = min(len(r), T)
        out[i, :n] = torch.tensor(r[:n], dtype=torch.float32)
    return out.to(device)


def autocast(cfg: RunConfig, model):
    """The update's forward precision: bf16 autocast on the model's device, or nothing (fp32/model.dtype)."""
    if cfg.update.mixed_precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16)


def micro_loss(model, mb: Batch, cfg: RunConfig, pad_id: int, settings: LossSettings, ref_model=None):
    """Forward one micro-batch and return the LossOutput (loss with grad)."""
    need_entropy = True  # entropy statistics are cheap at these sizes and drive the analysis
    with autocast(cfg, model):  # the forward only: the loss itself is computed on float32 log-probs
        sc = score_responses(
            model,
            mb.contexts,
            mb.responses,
            pad_id=pad_id,
            temperature=cfg.rollout.temperature,
            with_entropy=need_entropy,
        )
    dev = sc.logprobs.device
    T = sc.logprobs.shape[1]
    prefix_mask = torch.arange(T, device=dev)[None, :] < torch.tensor(mb.prefix_len, device=dev)[:, None]
    ref = None
    if ref_model is not None:
        with torch.no_grad(), autocast(cfg, ref_model):
            ref = score_responses(
                ref_model,
                mb.contexts,
                mb.responses,
                pad_id=pad_id,
                temperature=cfg.rollout.temperature,
                with_entropy=False,
            ).logprobs
    inp = LossInputs(
        logprobs=sc.logprobs,
        old_logprobs=_padded(mb.old_logprobs, T, dev),
        behaviour_logprobs=_padded(mb.behaviour_logprobs, T, dev),
        advantages=torch.tensor(mb.advantages, dtype=torch.float32, device=dev),
        response_mask=sc.mask,
        prefix_mask=prefix_mask & sc.mask,
        seeded=torch.tensor(mb.seeded, device=dev),
        entropy=sc.entropy if cfg.loss.entropy_coeff > 0 else (sc.entropy.detach() if sc.entropy is not None else None),
        ref_logprobs=ref,
    )
    out = compute_policy_loss(inp, settings)
    _age_stats(out.stats, sc.logprobs.detach(), inp.behaviour_logprobs, inp.prefix_mask, mb.source_age)
    return out


AGE_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100)  # lower edges of the source-age buckets


def age_bucket(age: int) -> str:
    """'age=0', 'age=1', 'age=2-4', ..., 'age=100+': the label of a seed's source age."""
    lo = max(b for b in AGE_BUCKETS if b <= age)
    nxt = [b for b in AGE_BUCKETS if b > lo]
    if not nxt:
        return f"age={lo}+"
    return f"age={lo}" if nxt[0] == lo + 1 else f"age={lo}-{nxt[0] - 1}"


@torch.no_grad()
def _age_stats(
    stats: Stats, logprobs: torch.Tensor, behaviour: torch.Tensor, prefix_mask: torch.Tensor, ages: list[int]
) -> None:
    """Mean |log π_θ − log π_h| over prefix tokens, by the seed's source age (issue #9): how
    off-policy the "historical" seeds really are. Age 0 = θ_k wrote the seed itself.

    A sequence without prefix tokens adds 0 to the sum and the count (no `n > 0` test: that would
    wait for the GPU once per sequence); a bucket with count 0 is left out of the metrics."""
    gap = (logprobs - behaviour).abs() * prefix_mask
    for i, age in enumerate(ages):
        if age >= 0:
            stats.add(f"actor/prefix_abs_log_ratio/{age_bucket(age)}", gap[i].sum(), prefix_mask[i].sum())


def _loss_token_count(b: Batch, prefix_loss: str) -> int:
    # Tokens in the loss: `context` prefixes are not.
    return sum(len(r) - (p if prefix_loss == "context" else 0) for r, p in zip(b.responses, b.prefix_len, strict=True))


def schedule(
    n: int, cfg: RunConfig, epoch: int, rank: int, world: int, order: list[int] | None = None
) -> list[tuple[list[int], list[list[int]]]]:
    """One epoch of the update: per optimizer step, (its mini-batch, this rank's micro-batches).

    `order` is shuffled in place (seeded by run seed and epoch, the same on every rank, so shards
    stay disjoint); train_on_batch passes one list to every epoch (each reshuffles the last order).
    """
    u = cfg.update
    order = list(range(n)) if order is None else order
    random.Random(cfg.seed * 1000 + epoch).shuffle(order)
    n_mb = min(u.mini_batches, len(order))
    steps = []
    for m in range(n_mb):
        mini = order[m * len(order) // n_mb : (m + 1) * len(order) // n_mb]
        shard = mini[rank::world]
        steps.append((mini, [shard[s : s + u.micro_batch_size] for s in range(0, len(shard), u.micro_batch_size)]))
    return steps


def recompute_old_logprobs(model, batch: Batch, cfg: RunConfig, pad_id: int, world: int = 1) -> dict[str, float]:
    """π_old from the trainer itself, for engines whose numerics differ (bf16, vLLM).

    Scored in the update's own precision (autocast) and in the micro-batches of the first optimizer
    step of every rank, so that step's forward sees the very same inputs: on-policy ratios start at
    exactly 1 on unchanged weights, not at 1 ± the engine's rounding. Returns how far the engine's
    log-probs were from the trainer's on the tokens the engine sampled with θ_k (after any prefix).
    """
    max_diff, sum_diff, n_tok = 0.0, 0.0, 0
    with torch.no_grad(), autocast(cfg, model):
        for idx in (i for r in range(world) for _, micro in schedule(len(batch), cfg, 0, r, world) for i in micro):
            mb = batch.select(idx)
            sc = score_responses(
                model, mb.contexts, mb.responses, pad_id=pad_id, temperature=cfg.rollout.temperature, with_entropy=False
            )
            new = sc.logprobs.float().cpu()
            for j, i in enumerate(idx):
                n, p = len(batch.responses[i]), batch.prefix_len[i]
                old = batch.old_logprobs[i]
                if len(old) == n and n > p:
                    d = (new[j, p:n] - torch.tensor(old[p:], dtype=torch.float32)).abs()
                    max_diff, sum_diff, n_tok = max(max_diff, float(d.max())), sum_diff + float(d.sum()), n_tok + n - p
                batch.old_logprobs[i] = new[j, :n].tolist()
    if not n_tok:
        return {}
    return {"actor/engine_logprob_diff/max": max_diff, "actor/engine_logprob_diff/mean": sum_diff / n_tok}


def train_on_batch(
    model, batch: Batch, cfg: RunConfig, pad_id: int, optimizer, accelerator=None, ref_model=None
) -> Stats:
    """`update.epochs` passes of `update.mini_batches` optimizer steps over the batch.

    Returns this process's statistics, still tensors (reduce them once, across processes, with
    `Stats.metrics`): nothing in the loop waits for the GPU to report a number."""
    rank = accelerator.process_index if accelerator is not None else 0
    world = accelerator.num_processes if accelerator is not None else 1
    u = cfg.update
    stats = Stats()
    steps = 0
    order = list(range(len(batch)))
    for epoch in range(u.epochs):
        for mini, micro in schedule(len(batch), cfg, epoch, rank, world, order):
            mini_b = batch.select(mini)
            settings = loss_settings(
                cfg,
                global_tokens=float(max(1, _loss_token_count(mini_b, cfg.prefix.loss))),
                global_seqs=float(max(1, sum(1 for r in mini_b.responses if r))),
            )
            optimizer.zero_grad(set_to_none=True)
            for idx in micro:
                out = micro_loss(model, batch.select(idx), cfg, pad_id, settings, ref_model)
                loss = out.loss * world  # DDP averages over ranks; we want the global sum
                if accelerator is not None:
                    accelerator.backward(loss)  # outside autocast, as torch recommends
                else:
                    loss.backward()
                stats.merge(out.stats)
            params = [p for p in model.parameters() if p.requires_grad]
            if accelerator is not None:
                norm = accelerator.clip_grad_norm_(params, u.grad_clip)
            else:
                norm = torch.nn.utils.clip_grad_norm_(params, u.grad_clip)
            stats.add("actor/grad_norm", norm, 1)  # the mean over optimizer steps
            steps += 1
            optimizer.step()
    stats.add("actor/optimizer_steps", steps)
    return stats


def make_optimizer(model, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (all of them, or the LoRA adapters only)."""
    u = cfg.update
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=u.lr, betas=tuple(u.betas), weight_decay=u.weight_decay)


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


def load_state(
    policy_dir: Path, cfg: RunConfig, ref_dir: Path | None = None, accelerator=None, policy=None
) -> TrainState:
    """θ_k (+ its optimizer state, + the reference model when kl_coef > 0), on the training device.

    `policy` lets an in-process caller pass an already loaded (model, tokenizer) to skip a load.
    """
    model, tok = policy if policy is not None else load_policy(policy_dir, cfg.model.dtype, cfg.model.lora)
    # In process: cfg.device; under accelerate: its device (prepare would move it too, but the
    # π_old recompute runs before prepare and must see the training device's numerics).
    device = accelerator.device if accelerator is not None else resolve_device(cfg.device)
    world = accelerator.num_processes if accelerator is not None else 1
    model.to(device)
    model.train()
    model.config.use_cache = False
    optimizer = make_optimizer(model, cfg)
    opt_path = Path(policy_dir) / OPTIMIZER_NAME
    if policy is not None and (Path(policy_dir) / "manifest.json").is_file():
        from thinking_seeds.store.checkpoints import verified

        verified(policy_dir)  # the in-memory policy skipped load_model: its optimizer state is checked here
    if opt_path.exists():
        load_optimizer_state(optimizer, opt_path)  # torch moves the state to the parameters' device
    ref_model = None
    if cfg.loss.kl_coef > 0:
        ref_model, _ = load_model(ref_dir, cfg.model.dtype, device=device)
    return TrainState(model, tok, optimizer, ref_model, device, world)


def update_state(
    st: TrainState, rollouts_path: Path, out_root: Path | None, step: int, cfg: RunConfig, accelerator=None, keep=False
) -> dict:
    """Train `st` on the rollouts and save it as `out_root/step_{step}` (None: no file); the metrics.

    keep=True (the persistent trainer): the weights stay on the training device and in train mode
    after the save, ready for the next update; otherwise θ_{k+1} is written from a CPU copy.
    """
    import time

    t0 = time.perf_counter()
    # Seeded after the load, so an update from weights already in memory and one from weights just
    # read from disk start from the same generator state.
    torch.manual_seed(cfg.seed + step)
    model, tok, world = st.model, st.tok, st.world
    batch = load_batch(Path(rollouts_path))
    engine_diff: dict[str, float] = {}
    if cfg.update.recompute_old_logprobs:
        engine_diff = recompute_old_logprobs(model, batch, cfg, tok.pad_token_id, world)

    if st.train_model is None:
        st.train_model, st.train_optimizer = (
            accelerator.prepare(model, st.optimizer) if accelerator is not None else (model, st.optimizer)
        )
    t1 = time.perf_counter()
    stats = train_on_batch(st.train_model, batch, cfg, tok.pad_token_id, st.train_optimizer, accelerator, st.ref_model)
    if st.device.type == "cuda":
        torch.cuda.synchronize(st.device)  # so perf/fwd_bwd_s is the GPU's time, not the launch queue's
        stats.add("perf/cuda_max_memory_gib", torch.cuda.max_memory_allocated(st.device) / 2**30)
    t2 = time.perf_counter()
    # The one reduction (and host-device sync) of the update: sums and counts SUM, maxima MAX over
    # every process, so a mean is over the union of all processes' tokens (algo/stats.py).
    metrics = stats.metrics(across_processes=world > 1)
    metrics.update(engine_diff)  # every process scored the whole batch: the same numbers everywhere
    metrics["actor/lr"] = cfg.update.lr
    metrics["perf/num_processes"] = float(world)

    if accelerator is not None:
        accelerator.wait_for_everyone()
        if not accelerator.is_main_process:
            return metrics
    model.eval()
    model.config.use_cache = True
    t3 = time.perf_counter()
    if not keep:
        model.to("cpu")  # θ_{k+1} is written from a CPU copy (fp32 masters under mixed precision)
    # Timing split for bench/iteration.py: forward/backward + optimizer, saving (and loading, by run_update).
    metrics["perf/fwd_bwd_s"] = t2 - t1
    metrics["perf/load_s"] = t1 - t0  # the rollouts, the π_old recompute, accelerate's prepare
    # keep=True on a GPU: save_pretrained and the optimizer state copy tensors to the host themselves
    # (same bytes), without moving the DDP-wrapped module off its device.
    if out_root is not None:  # None: θ_{k+1} stays in memory (train/resident.py writes checkpoints)
        save_checkpoint(
            model,
            tok,
            Path(out_root),
            step,
            extra={"metrics": metrics, "config_hash": cfg.config_hash()},
            optimizer=st.optimizer,
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
    import time

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
