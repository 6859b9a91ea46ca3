"""Policies held in memory instead of on disk: θ_k between two checkpoints (`checkpoint.every`).

The wire from whoever made θ to the engines of this process. Written by the update's end in this
process (pipeline/policy_chain.py `publish`: the in-process trainer's tensors, or those the persistent
trainer sent on its socket, transports/weights.py; a Ray rollout worker writes what the driver put into
the object store, engine/ray_workers.py); read by every engine load (engine/rollout.py,
engine/vllm_engine.py) and by the driver's Ray pool, which ships it on (transports/ray_objects.py).

The update hands θ_{k+1} to this process as a state dict (`publish`), keyed by the path its
checkpoint would have (`runs/<id>/policy/step_k`) and tagged with the policy's identity (a digest of
the manifests it was computed from: pipeline/policy_chain.py). Every engine load goes through
`lookup(path)` first (engine/rollout.py HFEngine.load_weights), so a stage names θ_k by its path
whether or not the file exists, and the weights come from memory when they are here.

In process (update.launcher=in_process) the tensors are the trainer's own parameters (no copy: the
engine copies them into its model); the entry is dropped before the next update changes them in
place (`drop_borrowed`; `keep_copy` when an older θ must still sample meanwhile). From the
persistent trainer their bytes arrive on its socket, read straight into
tensors (transports/weights.py; faster than a /dev/shm file: bench/weight_handoff.py). A CUDA
trainer in this process could publish its device tensors the same way (the engine's load_state_dict
copies device to device); one in another process would send CUDA IPC handles instead of bytes
(weights.send_weights / weights.receive_weights): that is the hook.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["LiveWeights", "clear", "drop", "drop_borrowed", "keep_copy", "keep_for", "lookup", "publish"]

KEEP = 2  # θ_k and θ_{k+1}: the evaluation of θ_{k+1} and the continuation of k+1 read the newest


@dataclass(frozen=True)
class LiveWeights:
    """A policy in memory: its identity (the same θ always has the same one) and its tensors."""

    policy_id: str
    state: dict[str, torch.Tensor]
    borrowed: bool = False  # the in-process trainer's own tensors, which its next update changes in place


_HELD: dict[str, LiveWeights] = {}
_LOCK = threading.Lock()


def keep_for(max_staleness: int) -> int:
    """How many policies a process holds: θ_k and θ_{k+1}, and with pipeline.max_staleness = s also the
    writers of the samples drawn ahead, θ_{k+1-s} .. θ_k."""
    return max(KEEP, max_staleness + 1)


def _key(path: Path | str) -> str:
    return str(Path(path).resolve())


def publish(
    path: Path | str, policy_id: str, state: dict[str, torch.Tensor], borrowed: bool = False, keep: int = KEEP
) -> None:
    """Hold `state` as the weights of the policy whose checkpoint would be `path`; beyond `keep` policies
    the oldest goes (pipeline.max_staleness = s keeps s + 1: the writer of the samples drawn ahead)."""
    with _LOCK:
        _HELD.pop(_key(path), None)
        _HELD[_key(path)] = LiveWeights(policy_id, state, borrowed)
        while len(_HELD) > keep:
            _HELD.pop(next(iter(_HELD)))


def keep_copy(path: Path | str) -> None:
    """Replace a borrowed entry by a copy of its tensors, so it outlives the update that changes them
    (bounded staleness: θ_k still samples while update k runs in process)."""
    with _LOCK:
        live = _HELD.get(_key(path))
        if live is not None and live.borrowed:
            state = {n: t.detach().clone() for n, t in live.state.items()}
            _HELD[_key(path)] = LiveWeights(live.policy_id, state, borrowed=False)


def drop_borrowed(root: Path | str) -> None:
    """Forget the run's entries that are the trainer's own tensors: its next update changes them."""
    prefix = _key(root) + "/"
    with _LOCK:
        for k in [k for k, v in _HELD.items() if v.borrowed and k.startswith(prefix)]:
            del _HELD[k]


def lookup(path: Path | str) -> LiveWeights | None:
    with _LOCK:
        return _HELD.get(_key(path))


def drop(path: Path | str) -> None:
    with _LOCK:
        _HELD.pop(_key(path), None)


def clear(root: Path | str | None = None) -> None:
    """Forget the policies of one run (those under `root`), or all of them."""
    prefix = None if root is None else _key(root) + "/"
    with _LOCK:
        for k in [k for k in _HELD if prefix is None or k.startswith(prefix)]:
            del _HELD[k]
