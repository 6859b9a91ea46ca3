"""Rollout–trainer mismatch: truncated importance sampling from the engine's policy to the trainer's.

The engine that sampled a response (vLLM, or the HF engine with bf16 weights and a KV cache) does
not compute the same log-probs as the trainer's forward at the same weights θ_k. PPO's ratio
π_θ/π_old is taken against the trainer's π_old (update.recompute_old_logprobs), so the samples
themselves came from another distribution, π_engine. verl's decoupled correction multiplies each
token's loss by a detached weight ρ = π_trainer(θ_old) / π_engine, truncated (verl:
`rollout_correction.rollout_is` token | sequence with `rollout_is_threshold`, and `rollout_rs`
sequence masking; TRL: `vllm_importance_sampling_correction` with `vllm_importance_sampling_cap`):

    token_tis   ρ_t = min(π_trainer(y_t) / π_engine(y_t), cap)                    per token
    seq_tis     ρ   = min(Π_t π_trainer / π_engine, cap), on every token of the sequence
    seq_mask    ρ   = 1 if 1/cap <= Π_t π_trainer / π_engine <= cap else 0       (rejection)

Only tokens the engine sampled with θ_k enter (on-policy samples and continuations, not a
historical prefix: its denominator π_h is another policy, handled by the prefix loss). The same
tokens give the mismatch metrics: k1 and k3 estimates of KL(π_engine || π_trainer) with samples
from the engine, the largest |log ratio|, and the share of tokens (or sequences) truncated or masked.
Pure torch; the trainer calls it once per update on the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

LOG_RATIO_BOUND = 20.0  # exp overflow guard only (verl bounds at the same e^±20)


def _seq_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (log_ratio * mask).sum(-1).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)


def token_tis(log_ratio: torch.Tensor, mask: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token truncated IS; returns (weights on mask, 1 elsewhere; per-token 'truncated' flags)."""
    raw = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    hit = (raw > cap) & mask
    return torch.where(mask, raw.clamp(max=cap), torch.ones_like(raw)), hit


def seq_tis(log_ratio: torch.Tensor, mask: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence-level truncated IS: one weight per sequence (the product of its token ratios)."""
    raw = torch.exp(_seq_log_ratio(log_ratio, mask))
    w = raw.clamp(max=cap)[:, None].expand_as(log_ratio)
    return torch.where(mask, w, torch.ones_like(w)), (raw > cap)


def seq_mask(log_ratio: torch.Tensor, mask: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence-level rejection: a sequence whose ratio leaves [1/cap, cap] carries no gradient."""
    raw = torch.exp(_seq_log_ratio(log_ratio, mask))
    out = (raw > cap) | (raw < 1.0 / cap)
    w = (~out).to(log_ratio.dtype)[:, None].expand_as(log_ratio)
    return torch.where(mask, w, torch.ones_like(w)), out


CorrectionFn = Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]
CORRECTIONS: dict[str, CorrectionFn] = {"token_tis": token_tis, "seq_tis": seq_tis, "seq_mask": seq_mask}


def mismatch_metrics(log_ratio: torch.Tensor, mask: torch.Tensor, prefix: str = "rollout_corr") -> dict[str, float]:
    """KL(π_engine || π_trainer) over the tokens of `mask`, sampled from the engine, with
    log_ratio = log π_trainer - log π_engine: k1 = -log_ratio (unbiased, may be < 0), k3 = ρ - 1 - log ρ
    (≥ 0, lower variance); and max |log_ratio|. Empty mask: no metrics."""
    m = mask.bool()
    n = int(m.sum())
    if not n:
        return {}
    lr = log_ratio[m].double().clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return {
        f"{prefix}/kl_k1": float((-lr).mean()),
        f"{prefix}/kl_k3": float((torch.exp(lr) - 1.0 - lr).mean()),
        f"{prefix}/log_ratio_abs_max": float(lr.abs().max()),
        f"{prefix}/tokens": float(n),
    }


def rollout_correction(
    trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor, mode: str, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The (B, T) detached loss weights of `mode` (all 1 for `none`) and the mismatch metrics.

    trainer_logprobs / engine_logprobs: log π_old as the trainer and as the engine computed it, (B, T);
    mask: the engine-sampled tokens of θ_old (response, not prefix, not padding)."""
    mask = mask.bool()
    log_ratio = (trainer_logprobs - engine_logprobs).double() * mask
    metrics = mismatch_metrics(log_ratio, mask)
    if mode == "none":
        return torch.ones_like(trainer_logprobs), metrics
    if mode not in CORRECTIONS:
        raise KeyError(f"unknown loss.rollout_correction {mode!r}; known: none, {', '.join(sorted(CORRECTIONS))}")
    w, hit = CORRECTIONS[mode](log_ratio, mask, cap)
    w = w.to(trainer_logprobs.dtype)
    if metrics:
        metrics["rollout_corr/weight_mean"] = float(w[mask].double().mean())
        metrics["rollout_corr/weight_max"] = float(w[mask].max())
        if mode == "token_tis":
            metrics["rollout_corr/truncated_frac"] = float(hit.sum()) / float(mask.sum())
        else:  # sequence level: the share of sequences (with at least one such token)
            seqs = mask.any(-1)
            key = "rollout_corr/masked_frac" if mode == "seq_mask" else "rollout_corr/truncated_frac"
            metrics[key] = float((hit & seqs).sum()) / max(1.0, float(seqs.sum()))
    return w.detach(), metrics
