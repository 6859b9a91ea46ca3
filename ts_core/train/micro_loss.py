"""One micro-batch's forward and loss: the loss settings of a run, the forward's precision, the
typed loss inputs of algo/losses.py, and the by-source-age statistics of the seeds.

With `update.mixed_precision=bf16` the forward runs under bf16 autocast while the loss itself is
computed on float32 log-probs.
"""

from __future__ import annotations

import contextlib

import torch

from thinking_seeds.algo.losses import LossInputs, LossSettings, compute_policy_loss
from thinking_seeds.algo.stats import Stats
from thinking_seeds.config import RunConfig
from thinking_seeds.engine.scoring import ResponseScores, score_responses
from thinking_seeds.train.batch import Batch
from thinking_seeds.train.packed_scoring import score_packed
from thinking_seeds.train.rollout_weights import padded, weights_tensor

loss_settings = LossSettings.from_config  # (cfg, **global counts): the run's LossSettings


def autocast(cfg: RunConfig, model):
    """The update's forward precision: bf16 autocast on the model's device, or nothing (fp32/model.dtype)."""
    if cfg.update.mixed_precision != "bf16":
        return contextlib.nullcontext()
    device_type = next(model.parameters()).device.type
    if device_type == "cuda":
        # What autocast leaves in fp32 (the loss, the chunked head's fp32 logits) runs on TF32 tensor cores:
        # bf16 already decides the update's precision; mixed_precision=no keeps exact fp32 matmuls.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return torch.autocast(device_type=device_type, dtype=torch.bfloat16)


def score(model, mb: Batch, cfg: RunConfig, pad_id: int, with_entropy: bool) -> ResponseScores:
    """The micro-batch's response log-probs (B, T): padded (engine/scoring.py) or, with update.packed,
    from one packed row (train/packed_scoring.py); the same tensors either way. Through the LM head in
    chunks (update.logprob_chunk_size); the entropy has a gradient only when the loss uses it."""
    kw = dict(
        temperature=cfg.rollout.temperature,
        with_entropy=with_entropy,
        chunk_size=cfg.update.logprob_chunk_size,
        entropy_grad=cfg.loss.entropy_coeff > 0,
    )
    if cfg.update.packed:
        return score_packed(model, mb.contexts, mb.responses, **kw)
    return score_responses(model, mb.contexts, mb.responses, pad_id=pad_id, **kw)


def micro_loss(model, mb: Batch, cfg: RunConfig, pad_id: int, settings: LossSettings, ref_model=None):
    """Forward one micro-batch and return the LossOutput (loss with grad)."""
    with autocast(cfg, model):  # the forward only: the loss itself is computed on float32 log-probs
        # with entropy: its statistics are cheap at these sizes and drive the analysis
        sc = score(model, mb, cfg, pad_id, with_entropy=True)
    dev = sc.logprobs.device
    T = sc.logprobs.shape[1]
    prefix_mask = torch.arange(T, device=dev)[None, :] < torch.tensor(mb.prefix_len, device=dev)[:, None]
    ref = None
    if ref_model is not None:
        with torch.no_grad(), autocast(cfg, ref_model):
            ref = score(ref_model, mb, cfg, pad_id, with_entropy=False).logprobs
    inp = LossInputs(
        logprobs=sc.logprobs,
        old_logprobs=padded(mb.old_logprobs, T).to(dev),
        behaviour_logprobs=padded(mb.behaviour_logprobs, T).to(dev),
        advantages=torch.tensor(mb.advantages, dtype=torch.float32, device=dev),
        response_mask=sc.mask,
        prefix_mask=prefix_mask & sc.mask,
        seeded=torch.tensor(mb.seeded, device=dev),
        entropy=sc.entropy if cfg.loss.entropy_coeff > 0 else (sc.entropy.detach() if sc.entropy is not None else None),
        ref_logprobs=ref,
        token_weights=weights_tensor(mb.token_weights, T, dev),
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
