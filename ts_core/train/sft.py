"""The supervised step: worked solutions encoded once, AdamW with its schedule, one step on a random batch.

    ids, labels, lengths = encode_corpus(tok, pairs)          # (question, solution) pairs
    opt, sched = sft_optimizer(model, lr=2e-3, warmup_steps=75)
    loss = sft_step(model, opt, sched, ids, labels, 64, gen, tok.pad_token_id)

One step for every supervised loop of the project: the warm-up that builds the tiny base models
(train/warmup.py), the equal-compute SFT control that continues it (experiments/sft_control.py), and
SmolLM2's answer-format warm-up (train/smollm2.py), so "more warm-up" means exactly this step. The
loops around it differ (a step count with evaluations, a wall-time budget, a fixed count) and stay
with their callers. Apart from warmup.py because two of them are not the warm-up.
"""

from __future__ import annotations

import torch

from thinking_seeds.engine.models import encode_prompt
from thinking_seeds.train.lr_schedule import lr_factor

__all__ = ["encode_corpus", "sft_optimizer", "sft_step"]


def encode_corpus(tok, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (N, L) input ids, labels (the answer and its EOS only) and row lengths.

    Lengths are explicit because "not pad" cannot tell where a row ends when the pad token is
    also the end-of-turn token (SmolLM2's `<|im_end|>`).
    """
    rows, labels = [], []
    for q, s in pairs:
        p = encode_prompt(tok, [{"role": "user", "content": q}])
        a = tok(s, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        rows.append(p + a)
        labels.append([-100] * len(p) + a)
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), tok.pad_token_id, dtype=torch.long)
    lab = torch.full((len(rows), L), -100, dtype=torch.long)
    for i, (r, row_labels) in enumerate(zip(rows, labels, strict=True)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(row_labels)] = torch.tensor(row_labels)
    return ids, lab, torch.tensor([len(r) for r in rows])


def sft_optimizer(
    model: torch.nn.Module, lr: float, warmup_steps: int, total_steps: int | None = None, min_factor: float = 0.1
):
    """The warm-up's AdamW and its schedule (`lr_factor`: ramp, then constant or cosine)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, warmup_steps, total_steps, min_factor))
    return opt, sched


def sft_step(
    model,
    opt,
    sched,
    ids: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int,
    gen: torch.Generator,
    pad_id: int | None = None,
    lengths: torch.Tensor | None = None,
) -> float:
    """One supervised step on a random batch of the encoded corpus; returns the loss.

    Without `lengths` the batch is cut at its longest row by "not `pad_id`" and no attention mask is
    passed (right padding after a causal mask changes nothing: the warm-ups' and the SFT control's
    numerics). With `lengths` (encode_corpus's third tensor) the batch is cut at its longest row and
    the pads are masked: a pad token that is also the end-of-turn token (SmolLM2) cannot mark a row's
    end. `sched` None: a constant lr (no scheduler step).
    """
    model.train()
    idx = torch.randint(0, ids.shape[0], (batch_size,), generator=gen)
    if lengths is None:
        x, y = ids[idx], labels[idx]
        keep = int((x != pad_id).sum(-1).max())
        out = model(input_ids=x[:, :keep], labels=y[:, :keep])
    else:
        keep = int(lengths[idx].max())
        x, y = ids[idx, :keep], labels[idx, :keep]
        attn = (torch.arange(keep)[None, :] < lengths[idx][:, None]).long()
        out = model(input_ids=x, attention_mask=attn, labels=y)
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if sched is not None:
        sched.step()
    return out.loss.item()
