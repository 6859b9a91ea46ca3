"""Several checkpoints of one model in one forward pass: the HF engine's way to draft for every pool
member at once (the seeds stage), as vLLM does with a LoRA adapter per request.

Why: the drafts of a pool of M members are M engine calls of a few rows each. On the CPU, and on a
GPU for a small model, a decode step costs about the same at 16 rows as at 64 (it is bound by the
number of operations, not by their size: tiny preset, 2.8 ms at 16 rows, 4.0 ms at 64), so M calls
cost ~M times one. Here the M checkpoints' weights are stacked, and a batch whose rows are grouped
by checkpoint (job-major, every group the same number of rows) runs each matrix product as one
batched product over the groups: one forward per decode step for every member.

Only the modules that hold weights change: `nn.Linear` (a batched matmul), `nn.Embedding` (one table
of the M vocabularies) and the RMS norms (`weight * x / rms(x)`); attention, rotary positions and the
KV cache hold none and see an ordinary batch. A model with any other module holding weights, or whose
norm is not that formula, is not stacked: `StackedModel.build` checks the structure, then a forward of
two copies of the model's own weights against the model itself, and returns None (the engine then swaps
weights call after call, as before). Costs M copies of the weights, so the engine stacks only up to
`MAX_STACKED_BYTES` (engine/rollout.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

_NORM_SUFFIX = "RMSNorm"


class StackedLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        # [jobs, in, out]: x of one group [rows, in] times its checkpoint's W^T, all groups in one bmm
        self.register_buffer("weight_t", weight.transpose(1, 2).contiguous(), persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        self.jobs = weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.bmm(x.reshape(self.jobs, -1, shape[-1]), self.weight_t)
        if self.bias is not None:
            y = y + self.bias[:, None, :]
        return y.reshape(*shape[:-1], y.shape[-1])


class StackedEmbedding(nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.jobs, self.vocab = weight.shape[0], weight.shape[1]
        self.register_buffer("table", weight.reshape(-1, weight.shape[-1]), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # row group j reads checkpoint j's table: its ids shifted by j vocabularies
        grouped = ids.reshape(self.jobs, -1)
        offset = torch.arange(self.jobs, device=ids.device)[:, None] * self.vocab
        return nn.functional.embedding((grouped + offset).reshape(ids.shape), self.table)


class StackedRMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.register_buffer("weight", weight, persistent=False)
        self.jobs, self.eps = weight.shape[0], eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        h = h.to(dtype).reshape(self.jobs, -1, x.shape[-1]) * self.weight[:, None, :]
        return h.reshape(x.shape)


def _eps(m: nn.Module) -> float | None:
    """The epsilon of an RMS norm (transformers names it variance_epsilon or eps), None if it has none."""
    return next((v for a in ("variance_epsilon", "eps") if isinstance(v := getattr(m, a, None), float)), None)


def _is_norm(m: nn.Module) -> bool:
    names = {n for n, _ in m.named_parameters(recurse=False)}
    return (
        type(m).__name__.endswith(_NORM_SUFFIX) and names == {"weight"} and m.weight.dim() == 1 and _eps(m) is not None
    )


def weight_bytes(model: nn.Module) -> int:
    """The bytes of `model`'s parameters: one copy, what each stacked checkpoint costs."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def model_params(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every parameter of `model` by name, tied ones under each of their names."""
    return {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}


def stackable(model: nn.Module) -> bool:
    """Whether every module holding weights is a Linear, an Embedding or an RMS norm (structure only)."""
    holders = (m for m in model.modules() if any(True for _ in m.parameters(recurse=False)))
    return all(isinstance(m, nn.Linear | nn.Embedding) or _is_norm(m) for m in holders)


class StackedModel:
    """A skeleton of `model` (the same config and code) whose weight modules hold several checkpoints'
    weights; `load(states)` fills it, then a forward over `jobs × rows` job-major rows runs row group j
    under checkpoint j."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model  # the engine's model: the layout of every weight
        self.model_bytes = weight_bytes(model)
        self.skeleton: nn.Module | None = None
        self.tags: list[str] = []  # the checkpoint of each row group the skeleton holds now
        self.held: dict[str, dict[str, torch.Tensor]] = {}  # their parameters, by checkpoint

    def holding(self, sources: list[tuple[str, Path]], read: Callable[[Path], dict[str, torch.Tensor]]) -> nn.Module:
        """The skeleton with row group i under checkpoint `sources[i]` (its identity, HFEngine._source, and
        its directory); `read(directory)` gives the parameters of one not held already. Consecutive seeds
        stages share most pool members: only a new one is read, and the stack is rebuilt only on a change."""
        tags = [tag for tag, _ in sources]
        if tags != self.tags:
            held = {t: p for t, p in self.held.items() if t in tags}
            for tag, directory in sources:
                if tag not in held:
                    held[tag] = read(directory)
            self.load([held[t] for t in tags])
            self.held, self.tags = held, list(tags)
        assert self.skeleton is not None
        return self.skeleton

    @classmethod
    def build(cls, model: nn.Module) -> StackedModel | None:
        """A StackedModel of `model`, or None when stacking would not compute what `model` computes."""
        if not stackable(model):
            return None
        s = cls(model)
        s.load([model_params(model)] * 2)
        ids = torch.randint(0, model.config.vocab_size, (2, 5), device=next(model.parameters()).device)
        with torch.no_grad():
            want = model(input_ids=ids[:1], use_cache=False).logits
            got = s.skeleton(input_ids=ids, use_cache=False).logits
            alone = model(input_ids=ids[1:], use_cache=False).logits
        tol = 1e-3 if want.dtype == torch.float32 else 3e-2  # bf16: a batched product rounds otherwise
        ok = all(
            torch.allclose(g.float(), w.float(), rtol=tol, atol=tol) for g, w in ((got[:1], want), (got[1:], alone))
        )
        return s if ok else None

    def load(self, params: list[dict[str, torch.Tensor]]) -> None:
        """Stack the parameters of each checkpoint (name -> tensor, as `model.named_parameters()`)."""
        if self.skeleton is None:
            self.skeleton = copy.deepcopy(self.model)
        modules = dict(self.model.named_modules())
        stacked = {}
        for name, m in modules.items():
            if not any(True for _ in m.parameters(recurse=False)):
                continue
            w = torch.stack([p[f"{name}.weight" if name else "weight"] for p in params])
            if isinstance(m, nn.Linear):
                b = torch.stack([p[f"{name}.bias"] for p in params]) if m.bias is not None else None
                stacked[name] = StackedLinear(w, b)
            elif isinstance(m, nn.Embedding):
                stacked[name] = StackedEmbedding(w)  # padding_idx only masks gradients: none here
            else:
                stacked[name] = StackedRMSNorm(w, _eps(m))
        for name, new in stacked.items():
            parent_name, _, attr = name.rpartition(".")
            parent = self.skeleton.get_submodule(parent_name) if parent_name else self.skeleton
            setattr(parent, attr, new)
        self.skeleton.eval()
        self.tags = []  # holds what `params` gave, under no checkpoint's name (`holding` names them)
