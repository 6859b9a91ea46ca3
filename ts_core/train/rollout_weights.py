"""The trainer's side of loss.rollout_correction: the engine's π_old against its own, per token.

`update_state` keeps the engine's log-probs (the rollouts' old_logprobs) before recomputing π_old
with its own forward, then calls `correct_batch`: the detached weights of algo/rollout_correction.py
go into `Batch.token_weights` and from there into `LossInputs.token_weights`. Only the tokens θ_k
sampled through the engine take part (on-policy responses and continuations, not a historical
prefix). The metrics are logged whenever π_old is recomputed, with the correction on or off.
"""

from __future__ import annotations

import torch

from thinking_seeds.algo.rollout_correction import rollout_correction


def padded(rows: list[list[float]], T: int, fill: float = 0.0) -> torch.Tensor:
    out = torch.full((len(rows), T), fill, dtype=torch.float32)
    for i, r in enumerate(rows):
        n = min(len(r), T)
        if n:
            out[i, :n] = torch.tensor(r[:n], dtype=torch.float32)
    return out


def correct_batch(batch, engine_logprobs: list[list[float]], mode: str, cap: float) -> dict[str, float]:
    """Set batch.token_weights (mode != none) from the trainer's recomputed batch.old_logprobs and the
    engine's; the rollout_corr/* metrics."""
    T = max((len(r) for r in batch.responses), default=0)
    if not T:
        return {}
    mask = torch.zeros((len(batch), T), dtype=torch.bool)
    for i, (resp, p, eng) in enumerate(zip(batch.responses, batch.prefix_len, engine_logprobs, strict=True)):
        if len(eng) == len(resp):  # rows the engine scored in full (not a whole historical trajectory)
            mask[i, p : len(resp)] = True
    weights, metrics = rollout_correction(padded(batch.old_logprobs, T), padded(engine_logprobs, T), mask, mode, cap)
    if mode != "none":
        batch.token_weights = [weights[i, : len(r)].tolist() for i, r in enumerate(batch.responses)]
    return metrics


def weights_tensor(rows: list[list[float]], T: int, device) -> torch.Tensor | None:
    """(B, T) loss weights of a micro-batch, 1 where a row has none (or past its end); None: no weights."""
    if not any(rows):
        return None
    return padded(rows, T, fill=1.0).to(device)
