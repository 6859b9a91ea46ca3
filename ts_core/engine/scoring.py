"""Per-token log-probs and entropies of given responses under a model (the trainer's forward).

Layout: contexts are left-padded and responses right-padded, so every response starts at the same
column and `logits_to_keep` returns exactly the response positions — the (B, L, V) logits of the
whole sequence are never materialised, which matters for 49k-token vocabularies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from thinking_seeds.engine.token_scores import chunk_tokens, head_scores, output_head, supports_head_scores


@dataclass
class ResponseScores:
    """logprobs, entropy: (B, T) at the given temperature; mask: (B, T) bool, response tokens."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    mask: torch.Tensor


def pack(contexts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int, device=None):
    """(input_ids, attention_mask, position_ids, response_ids, response_mask) for the layout above."""
    B = len(contexts)
    Lc = max(len(c) for c in contexts)
    T = max(1, max(len(r) for r in responses))
    ids = torch.full((B, Lc + T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, Lc + T), dtype=torch.long)
    resp = torch.full((B, T), pad_id, dtype=torch.long)
    rmask = torch.zeros((B, T), dtype=torch.bool)
    for i, (c, r) in enumerate(zip(contexts, responses, strict=True)):
        ids[i, Lc - len(c) : Lc] = torch.tensor(list(c), dtype=torch.long)
        attn[i, Lc - len(c) : Lc] = 1
        if r:
            ids[i, Lc : Lc + len(r)] = torch.tensor(list(r), dtype=torch.long)
            attn[i, Lc : Lc + len(r)] = 1
            resp[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
            rmask[i, : len(r)] = True
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    tensors = (ids, attn, pos, resp, rmask)
    return tuple(t.to(device) for t in tensors) if device is not None else tensors


def score_responses(
    model,
    contexts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    with_entropy: bool = True,
    chunk_size: int | None = None,
    entropy_grad: bool = True,
) -> ResponseScores:
    """log π(response_t | context, response_<t) / T-scaled, for every response token.

    Runs with whatever grad mode the caller set: under `torch.no_grad()` for analysis, with grad
    in the update. `chunk_size` (tokens; 0: sized by the vocabulary) scores through the LM head in
    chunks (engine/token_scores.py: no (B, T, V) tensor); None, or a head it cannot stand in for:
    the plain path. `entropy_grad=False` keeps the entropy out of the graph (chunked path).
    """
    dev = next(model.parameters()).device
    ids, attn, pos, resp, rmask = pack(contexts, responses, pad_id, dev)
    T = resp.shape[1]
    kw = dict(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=T + 1)
    if chunk_size is not None and supports_head_scores(model):
        chunk = chunk_tokens(output_head(model).out_features, chunk_size)
        with head_scores(
            model, resp, temperature=temperature, chunk=chunk, entropy=with_entropy, entropy_grad=entropy_grad
        ):
            scores = model(**kw).logits
        logprobs, entropy = scores[..., 0], scores[..., 1] if with_entropy else None
    else:
        # Position j predicts token j+1: logits at columns Lc-1 .. Lc+T-2 score the T response tokens.
        logprobs, entropy = logit_scores(model(**kw).logits[:, :T, :], resp, temperature, with_entropy)
    return ResponseScores(logprobs=logprobs.masked_fill(~rmask, 0.0), entropy=entropy, mask=rmask)


def logit_scores(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-prob of each target, entropy or None) under softmax(logits / temperature), in float32: logits (..., V)."""
    logits = logits.float() / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, targets[..., None]).squeeze(-1) - logz
    if not with_entropy:
        return logprobs, None
    return logprobs, logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
