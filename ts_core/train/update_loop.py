"""The update loop: `update.epochs` passes of `update.mini_batches` optimizer steps over a batch,
gradient accumulation over micro-batches, and the π_old recompute that precedes it.

The loss is normalised by the *global* mini-batch token (or sequence) count, multiplied by N
because DDP (and FSDP2's reduce-scatter) averages gradients over N processes, so N processes
compute the same gradient as one, up to float summation order (tested). The statistics likewise:
sums and counts are SUM-reduced and maxima MAX-reduced once, at the end (algo/stats.py), so a
logged mean is over every process's tokens.

No work is repeated across processes: each scores π_old for its own micro-batches only (the scores are
then exchanged, a few bytes per token), and DDP all-reduces once per optimizer step, after the step's
last micro-batch (`no_sync` around the others; tested on two gloo ranks, e2e/test_rank_work.py). FSDP2
keeps its reduce-scatter per micro-batch: skipping it would hold every rank's unsharded gradients.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from thinking_seeds.algo.stats import Stats
from thinking_seeds.config import RunConfig
from thinking_seeds.train.batch import Batch, loss_token_count
from thinking_seeds.train.lr_schedule import lr_factor
from thinking_seeds.train.micro_batches import schedule
from thinking_seeds.train.micro_loss import autocast, loss_settings, micro_loss, score


def plan(batch: Batch, cfg: RunConfig, epoch: int, rank: int, world: int, order: list[int] | None = None):
    """micro_batches.schedule for this batch (its sequences' lengths for a token budget)."""
    lengths = [(len(c), len(r)) for c, r in zip(batch.contexts, batch.responses, strict=True)]
    return schedule(len(batch), cfg, epoch, rank, world, order, lengths=lengths, packed=cfg.update.packed)


def null_forward(model, pad_id: int):
    """A one-token forward: what a rank with no sequences left in a step runs, so that every rank's
    forward (FSDP2's all-gathers) and backward (DDP's all-reduce, FSDP2's reduce-scatter) pair up."""
    dev = next(model.parameters()).device
    return model(input_ids=torch.full((1, 1), pad_id, device=dev), use_cache=False, logits_to_keep=1)


def null_backward(model, pad_id: int) -> None:
    """The backward of a rank with no sequences left in this step: a one-token forward times zero, so
    the collectives of DDP's all-reduce (FSDP's all-gather and reduce-scatter) run on every rank."""
    (null_forward(model, pad_id).logits.float().sum() * 0.0).backward()


def no_sync(model, sync: bool):
    """DDP's `no_sync` unless `sync`: the gradients accumulate locally and the step's last backward
    all-reduces their sum (one all-reduce per optimizer step instead of one per micro-batch)."""
    if sync or not isinstance(model, DistributedDataParallel):
        return contextlib.nullcontext()
    return model.no_sync()


def recompute_old_logprobs(
    model, batch: Batch, cfg: RunConfig, pad_id: int, world: int = 1, rank: int = 0
) -> dict[str, float]:
    """π_old from the trainer itself, for engines whose numerics differ (bf16, vLLM).

    Scored in the update's own precision (autocast) and in this rank's micro-batches of the first epoch,
    so that the forward that trains on a sequence first sees the very same inputs: on-policy ratios start
    at exactly 1 on unchanged weights, not at 1 ± the engine's rounding. Each rank scores its own
    sequences; the scores are then gathered, so every rank holds the whole batch's (later epochs shuffle
    sequences across ranks). Returns how far the engine's log-probs were from the trainer's on the tokens
    the engine sampled with θ_k (after any prefix), the same numbers on every rank.
    """
    scored: dict[int, torch.Tensor] = {}
    with torch.no_grad(), autocast(cfg, model):
        for _, micro in plan(batch, cfg, 0, rank, world):
            for idx in micro:
                if not idx:  # another rank has more micro-batches here: FSDP2's all-gathers must pair up
                    null_forward(model, pad_id)
                    continue
                new = score(model, batch.select(idx), cfg, pad_id, with_entropy=False).logprobs.float().cpu()
                for j, i in enumerate(idx):
                    scored[i] = new[j, : len(batch.responses[i])].clone()  # not a view: pickled alone
    if world > 1:
        parts: list = [None] * world
        dist.all_gather_object(parts, scored)  # CPU tensors of a few bytes per token
        scored = {i: t for part in parts for i, t in part.items()}
    max_diff, sum_diff, n_tok = 0.0, 0.0, 0
    for i in sorted(scored):
        new = scored[i]
        n, p = len(batch.responses[i]), batch.prefix_len[i]
        old = batch.old_logprobs[i]
        if len(old) == n and n > p:
            d = (new[p:n] - torch.tensor(old[p:], dtype=torch.float32)).abs()
            max_diff, sum_diff, n_tok = max(max_diff, float(d.max())), sum_diff + float(d.sum()), n_tok + n - p
        batch.old_logprobs[i] = new.tolist()
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
        for mini, micro in plan(batch, cfg, epoch, rank, world, order):
            mini_b = batch.select(mini)
            settings = loss_settings(
                cfg,
                global_tokens=float(max(1, loss_token_count(mini_b, cfg.prefix.loss))),
                global_seqs=float(max(1, sum(1 for r in mini_b.responses if r))),
            )
            optimizer.zero_grad(set_to_none=True)
            for k, idx in enumerate(micro):
                # the forward too inside no_sync: DDP decides at the forward whether the backward reduces
                with no_sync(model, sync=k == len(micro) - 1):
                    if not idx:  # another rank has more micro-batches in this step
                        null_backward(model, pad_id)
                        continue
                    out = micro_loss(model, batch.select(idx), cfg, pad_id, settings, ref_model)
                    loss = out.loss * world  # DDP and FSDP2 average over ranks; we want the global sum
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
            if hasattr(norm, "full_tensor"):  # FSDP2: a replicated DTensor
                norm = norm.full_tensor()
            stats.add("actor/grad_norm", norm, 1)  # the mean over optimizer steps
            steps += 1
            set_warmup_lr(optimizer, u.lr, u.lr_warmup_steps)
            optimizer.step()
    stats.add("actor/optimizer_steps", steps)
    return stats


def set_warmup_lr(optimizer: torch.optim.Optimizer, lr: float, warmup_steps: int) -> None:
    """Set the lr of the step about to be taken. The step number is AdamW's own counter (state["step"],
    saved with every checkpoint), not a count kept here, so resume and replay need nothing else."""
    if warmup_steps <= 0:
        return
    for group in optimizer.param_groups:
        first = next((p for p in group["params"] if p in optimizer.state), None)
        done = int(optimizer.state[first]["step"]) if first is not None else 0
        group["lr"] = lr * lr_factor(done, warmup_steps)  # a linear ramp, then constant


def make_optimizer(model, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (all of them, or the LoRA adapters only)."""
    u = cfg.update
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=u.lr, betas=tuple(u.betas), weight_decay=u.weight_decay)
