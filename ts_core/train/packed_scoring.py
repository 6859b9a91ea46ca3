"""Padding-free scoring: a micro-batch's sequences concatenated into one row, positions restarting
at 0 for each sequence, no attention mask.

From those position_ids transformers' mask builder (masking_utils.find_packed_sequence_indices)
derives one causal block per sequence, so no token attends across sequences; flash-attention
implementations run it as variable-length attention without computing any padding, sdpa and eager
as one row with a block-diagonal mask (no padded MLP, norm or LM-head work, but attention over the
whole row). The logits are kept only at the positions that predict a response token
(`logits_to_keep` as an index tensor) and scattered back into the (B, T) layout of
engine/scoring.py, so the loss sees the same tensors as from the padded forward (tested to 1e-6).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from thinking_seeds.engine.scoring import ResponseScores, logit_scores
from thinking_seeds.engine.token_scores import chunk_tokens, head_scores, output_head, supports_head_scores


def pack_row(contexts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]):
    """(input_ids (1, N), position_ids (1, N), keep (K,), rows (K,), cols (K,), targets (K,)) of one packed row:
    logits at `keep` predict `targets`, the response token of sequence `rows` at column `cols`."""
    ids: list[int] = []
    pos: list[int] = []
    keep: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    targets: list[int] = []
    for i, (c, r) in enumerate(zip(contexts, responses, strict=True)):
        start = len(ids) + len(c)  # where the response starts in the row
        seq = list(c) + list(r)
        ids += seq
        pos += range(len(seq))
        keep += range(start - 1, start - 1 + len(r))  # position j predicts token j+1
        rows += [i] * len(r)
        cols += range(len(r))
        targets += r
    t = lambda v: torch.tensor(v, dtype=torch.long)  # noqa: E731
    return t(ids)[None], t(pos)[None], t(keep), t(rows), t(cols), t(targets)


def score_packed(
    model,
    contexts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    with_entropy: bool = True,
    chunk_size: int | None = None,
    entropy_grad: bool = True,
) -> ResponseScores:
    """engine/scoring.score_responses's result, from one packed row instead of a padded batch (`chunk_size`
    and `entropy_grad` as there)."""
    dev = next(model.parameters()).device
    ids, pos, keep, rows, cols, targets = (x.to(dev) for x in pack_row(contexts, responses))
    B, T = len(responses), max(1, max(len(r) for r in responses))
    mask = torch.zeros((B, T), dtype=torch.bool, device=dev)
    mask[rows, cols] = True
    logprobs = torch.zeros((B, T), dtype=torch.float32, device=dev)
    entropy = torch.zeros((B, T), dtype=torch.float32, device=dev) if with_entropy else None
    if keep.numel() == 0:
        return ResponseScores(logprobs=logprobs, entropy=entropy, mask=mask)
    kw = dict(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=False, logits_to_keep=keep)
    if chunk_size is not None and supports_head_scores(model):
        chunk = chunk_tokens(output_head(model).out_features, chunk_size)
        with head_scores(
            model, targets[None], temperature=temperature, chunk=chunk, entropy=with_entropy, entropy_grad=entropy_grad
        ):
            scores = model(**kw).logits[0]  # (K, 2)
        kept_logprobs, kept_entropy = scores[:, 0], scores[:, 1]
    else:  # (K, V) logits
        kept_logprobs, kept_entropy = logit_scores(model(**kw).logits[0], targets, temperature, with_entropy)
    logprobs = logprobs.index_put((rows, cols), kept_logprobs)
    if with_entropy:
        entropy = entropy.index_put((rows, cols), kept_entropy)
    return ResponseScores(logprobs=logprobs, entropy=entropy, mask=mask)
