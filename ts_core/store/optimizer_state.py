"""The optimizer state of a policy checkpoint, as safetensors (no pickle).

A checkpoint directory may carry `optimizer.safetensors` (store.checkpoints.save_checkpoint writes it
inside the same atomic directory, hashed like the weights), so a resumed run continues AdamW's
moments instead of restarting them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from thinking_seeds.store.atomic import atomic_path
from thinking_seeds.store.checkpoint_format import CheckpointError

__all__ = ["OptimizerSnapshot", "load_optimizer_state", "save_optimizer_state", "snapshot_optimizer"]

_OPTIMIZER_FORMAT = "thinking-seeds/optimizer-v1"


@dataclass(frozen=True)
class OptimizerSnapshot:
    """An optimizer's state_dict copied to the CPU: what a background checkpoint writes while the live
    optimizer goes on stepping (`snapshot_optimizer`); save_optimizer_state takes it like an optimizer."""

    name: str
    sd: dict

    def state_dict(self) -> dict:
        return self.sd


def snapshot_optimizer(optimizer: torch.optim.Optimizer) -> OptimizerSnapshot:
    """A CPU copy of the optimizer's state, detached from the tensors the next step changes."""
    sd = optimizer.state_dict()
    state = {
        idx: {k: v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v for k, v in st.items()}
        for idx, st in sd["state"].items()
    }
    return OptimizerSnapshot(
        type(optimizer).__name__, {"state": state, "param_groups": copy.deepcopy(sd["param_groups"])}
    )


def save_optimizer_state(optimizer: torch.optim.Optimizer | OptimizerSnapshot, path: Path) -> None:
    """Save optimizer.state_dict() as safetensors (no pickle), atomically.

    Per-parameter tensors become `state.{param_index}.{key}` (AdamW: exp_avg, exp_avg_sq, step);
    python-number state and the param_groups (lr, betas, ...) go to the file's JSON metadata.
    """
    from safetensors.torch import save_file

    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, float | int | bool | None]] = {}
    for idx, state in sd["state"].items():
        for key, value in state.items():
            if "." in key:
                raise ValueError(
                    f"optimizer state key {key!r} (param {idx}) contains '.', which the flat naming reserves"
                )
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{key}"] = value.detach().to("cpu").contiguous()
            elif value is None or isinstance(value, (bool, int, float)):
                scalars.setdefault(str(idx), {})[key] = value
            else:
                raise TypeError(
                    f"optimizer state {key!r} of param {idx} is a {type(value).__name__}; only tensors and "
                    f"numbers can be saved without pickle"
                )
    try:
        groups = json.dumps(sd["param_groups"])
    except TypeError as e:
        raise TypeError(
            f"optimizer param_groups are not JSON-serialisable ({e}); use python numbers for lr/betas, not tensors"
        ) from e
    metadata = {
        "format": _OPTIMIZER_FORMAT,
        "optimizer": optimizer.name if isinstance(optimizer, OptimizerSnapshot) else type(optimizer).__name__,
        "param_groups": groups,
        "scalar_state": json.dumps(scalars),
    }
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def load_optimizer_state(optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Load state saved by save_optimizer_state into `optimizer` (built over the same parameters)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"optimizer state {path} does not exist; was the checkpoint saved with optimizer=...?")
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if meta.get("format") != _OPTIMIZER_FORMAT:
        raise CheckpointError(
            f"{path} is not an optimizer state written by save_optimizer_state (format {meta.get('format')!r})"
        )
    if meta["optimizer"] != type(optimizer).__name__:
        raise CheckpointError(
            f"{path} holds {meta['optimizer']} state but the optimizer is {type(optimizer).__name__}; "
            "build the same optimizer class"
        )
    groups = json.loads(meta["param_groups"])
    current = optimizer.param_groups
    saved_sizes, current_sizes = [len(g["params"]) for g in groups], [len(g["params"]) for g in current]
    if saved_sizes != current_sizes:
        raise CheckpointError(
            f"{path} has param groups of sizes {saved_sizes} but the optimizer has {current_sizes}; "
            f"build the optimizer over the same model parameters, in the same order"
        )
    for saved, cur in zip(groups, current, strict=True):
        for key, value in saved.items():  # JSON turned tuples (betas) into lists: restore them
            if isinstance(cur.get(key), tuple) and isinstance(value, list):
                saved[key] = tuple(value)

    state: dict[int, dict[str, Any]] = {}
    for name, tensor in tensors.items():
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = tensor
    for idx, values in json.loads(meta["scalar_state"]).items():
        state.setdefault(int(idx), {}).update(values)

    params = [p for g in current for p in g["params"]]
    for idx, values in state.items():
        for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            if key in values and values[key].shape != params[idx].shape:
                raise CheckpointError(
                    f"{path}: state {key} of param {idx} has shape {tuple(values[key].shape)} but the param has "
                    f"{tuple(params[idx].shape)}; the optimizer was built over a different model"
                )
    optimizer.load_state_dict({"state": state, "param_groups": groups})
