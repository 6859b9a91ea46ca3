"""Per-token log-probs and entropies through the LM head in chunks, recomputed in the backward pass.

The plain path materialises the (tokens, vocabulary) logits in fp32, their softmax, `p * logits` and
what autograd saves of them: ~20 bytes per (response token × vocabulary entry), ~200 GB for a
micro-batch of 64 × 1,024-token responses at Qwen's 151,936 entries. Here the head runs on `chunk`
tokens at a time under activation checkpointing: the forward keeps only each chunk's hidden states
and its two outputs, and the backward recomputes one chunk's logits at a time. The peak is one chunk's
logits and their softmax, whatever the micro-batch, and the numbers are the plain path's: the same
matmul, logsumexp and gather per token (gradients equal to 1e-6, bitwise in one chunk; tested).

It works by standing in for the model's output head for one forward (`head_scores`): the model runs
its body and calls "lm_head" on exactly the positions it would have kept (`logits_to_keep`), and the
stand-in returns (.., 2) [log-prob, entropy] instead of (.., V) logits. So the body, its attention
implementation, LoRA layers and FSDP2's hooks (which unshard the head inside the model's forward) are
untouched. A head that is not a plain `nn.Linear`, or a model that rescales or soft-caps its logits after
the head, takes the plain path (`supports_head_scores`), and says so once in the log.

Wrappers (DDP, torch.compile, peft) keep their forward: the head is found in the model they wrap
(`unwrapped`) and stood in for there, while the forward still runs through the wrapper, so DDP's
reducer hooks see the head's gradient like any other (tested on two gloo ranks, e2e/test_rank_work.py).
Calling the inner module's forward instead would skip DDP's gradient all-reduce.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# One chunk's fp32 logits hold at most this many (token × vocabulary) entries (32 MB): at V = 151,936
# that is 55 tokens, so a chunk's transient (logits, softmax, p·logits, their gradient) stays ~0.2 GB;
# 2^24 (110 tokens) measured 2.7 bytes per (token × entry) at 4 × 256 tokens (bench/logprob_memory.py).
CHUNK_ENTRIES = 1 << 23
# config.json keys of models that change their logits after the head (soft-capping, scaling)
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
log = logging.getLogger(__name__)
_told: set[str] = set()  # the fallbacks already logged (once per process and reason)


def chunk_tokens(vocab_size: int, chunk_size: int = 0) -> int:
    """Tokens per chunk: `chunk_size`, or (0) as many as keep a chunk's logits within CHUNK_ENTRIES."""
    return chunk_size if chunk_size > 0 else max(1, CHUNK_ENTRIES // max(1, vocab_size))


def unwrapped(model):
    """The model inside DDP (`.module`), torch.compile (`_orig_mod`) and peft (`get_base_model()`): the one
    whose `get_output_embeddings()` is the LM head. Only for finding the head: forwards go through `model`."""
    peft = sys.modules.get("peft")  # loaded whenever a peft model exists; not imported here for nothing
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        elif peft is not None and isinstance(model, peft.PeftModel):
            model = model.get_base_model()
        else:
            return model


def output_head(model) -> torch.nn.Linear:
    """The LM head of `model` or of the model it wraps (`unwrapped`)."""
    return unwrapped(model).get_output_embeddings()


def supports_head_scores(model) -> bool:
    """Whether the model's head (under any wrapper) is a plain linear map whose output are the logits;
    if not, the reason is logged once (the full-logits path holds ~13x the memory)."""
    inner = unwrapped(model)
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    cfg = getattr(inner, "config", None)
    transforms = [k for k in _LOGIT_TRANSFORMS if getattr(cfg, k, None) not in (None, 1, 1.0)]
    if type(head) is torch.nn.Linear and not transforms:
        return True
    why = (
        f"its logits are changed after the head ({', '.join(transforms)})"
        if transforms
        else (f"its output head is a {type(head).__module__}.{type(head).__qualname__}, not a plain torch.nn.Linear")
    )
    reason = f"{type(model).__name__} around {type(inner).__name__}: {why}"
    if reason not in _told:
        _told.add(reason)
        log.warning(
            "update.logprob_chunk_size: %s; the log-probs take the full-logits path (about 13x the memory per "
            "token x vocabulary entry)",
            reason,
        )
    return False


def _chunk_scores(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    temperature: float,
    entropy: bool,
    entropy_grad: bool,
) -> torch.Tensor:
    """(n, 2): log π(target) and the entropy (0 when not asked for) of one chunk of hidden states, as the
    plain path computes them."""
    logits = F.linear(hidden, weight, bias).float()
    # in place: the linear's backward needs its input and weight, not its output (one (n, V) copy less)
    logits = logits.div_(temperature) if temperature != 1.0 else logits
    logz = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, targets[:, None]).squeeze(-1) - logz
    if not entropy:
        entropy = torch.zeros_like(logprobs)
    elif entropy_grad:
        entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    else:  # no graph through the softmax: the backward recomputes only what the log-probs need
        with torch.no_grad():
            entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return torch.stack([logprobs, entropy], dim=-1)


def chunked_scores(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk: int,
    entropy: bool = True,
    entropy_grad: bool = True,
) -> torch.Tensor:
    """hidden (..., H), targets (...) -> (..., 2) [log-prob, entropy], `chunk` tokens at a time."""
    shape = targets.shape
    h, y = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    parts = []
    for i in range(0, max(1, h.shape[0]), chunk):
        args = (h[i : i + chunk], weight, bias, y[i : i + chunk], temperature, entropy, entropy_grad)
        # checkpoint: nothing of the chunk's (n, V) tensors is kept for the backward; it recomputes them
        parts.append(checkpoint(_chunk_scores, *args, use_reentrant=False) if grad else _chunk_scores(*args))
    return torch.cat(parts).reshape(*shape, 2)


@contextlib.contextmanager
def head_scores(
    model, targets: torch.Tensor, *, temperature: float, chunk: int, entropy: bool, entropy_grad: bool
) -> Iterator[None]:
    """For one forward of `model`: its head returns (..., 2) [log-prob of `targets`, entropy] (module
    docstring). `targets` has the shape of the positions the head receives, but for extra trailing
    positions (the padded layout keeps T + 1 and reads T), which are dropped."""
    head = output_head(model)

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden[..., : targets.shape[-1], :]
        return chunked_scores(
            hidden,
            head.weight,
            head.bias,
            targets,
            temperature=temperature,
            chunk=chunk,
            entropy=entropy,
            entropy_grad=entropy_grad,
        )

    head.forward = forward  # an instance attribute shadows nn.Linear.forward; hooks still run around it
    try:
        yield
    finally:
        del head.forward
