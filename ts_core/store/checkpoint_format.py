"""What a checkpoint directory is and what its manifest says: names, the error, reading manifests.

A checkpoint is a Hugging Face directory `root/step_{step:06d}/` holding safetensors weights, the
config, the tokenizer, optionally `optimizer.safetensors`, and `manifest.json`:

    {"step", "created_at", "param_count", "sha256": {file: hex digest, every file}, "extra"}

This module reads manifests only (no torch, no hashing): listing a run's checkpoints stays cheap.
Writing and verifying live in `thinking_seeds.store.checkpoints`, the optimizer state in
`store.optimizer_state`, the pool that picks seed writers in `store.historical_pool`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thinking_seeds.store.contained import read_small

__all__ = [
    "MANIFEST_NAME",
    "OPTIMIZER_NAME",
    "CheckpointError",
    "CheckpointInfo",
    "checkpoint_dir",
    "list_checkpoints",
    "read_manifest",
    "rebuild_hint",
]

MANIFEST_NAME = "manifest.json"
OPTIMIZER_NAME = "optimizer.safetensors"
STEP_DIR = re.compile(r"^step_(\d{6,})$")


class CheckpointError(ValueError):
    """A checkpoint directory is missing, incomplete, corrupt or holds pickled weights."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What manifest.json says about one checkpoint (hashes are not re-checked: see verify_checkpoint)."""

    path: Path
    step: int
    created_at: str
    param_count: int
    sha256: Mapping[str, str] = field(repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict)


def checkpoint_dir(root: Path, step: int) -> Path:
    """The directory a checkpoint of `step` lives in: root/step_{step:06d}."""
    return Path(root) / f"step_{step:06d}"


def read_manifest(path: Path) -> CheckpointInfo:
    """The manifest of the checkpoint at `path` (hashes are not checked), or a one-line CheckpointError."""
    manifest_path = path / MANIFEST_NAME
    if not manifest_path.is_file():
        raise CheckpointError(
            f"checkpoint {path} has no {MANIFEST_NAME}; it was not written by save_checkpoint: {rebuild_hint(path)}"
        )
    try:
        m = json.loads(read_small(manifest_path))  # not through a link, not a FIFO, not 100 GB
        info = CheckpointInfo(
            path=path,
            step=int(m["step"]),
            created_at=str(m["created_at"]),
            param_count=int(m["param_count"]),
            sha256=dict(m["sha256"]),
            extra=dict(m.get("extra") or {}),
        )
    except (ValueError, KeyError, TypeError, OSError) as e:  # ValueError: DataError from read_small too
        raise CheckpointError(
            f"checkpoint {path} has an unreadable {MANIFEST_NAME} ({e!r}): {rebuild_hint(path)}"
        ) from e
    match = STEP_DIR.match(path.name)
    if match and int(match.group(1)) != info.step:
        raise CheckpointError(
            f"checkpoint {path} is named for step {int(match.group(1))} but its manifest says step {info.step}: "
            f"{rebuild_hint(path)}"
        )
    return info


def rebuild_hint(path: Path) -> str:
    """How to get a damaged checkpoint back, as the end of a one-line error.

    Inside a run directory every checkpoint is derived data: resuming the run notices the damage
    (RunDir.completed verifies the hashes), removes the directory and redoes the stage that wrote
    it -- the update from the previous policy step, the snapshot from the policy, θ_0 from the base
    model. Anywhere else we cannot know who wrote it.
    """
    path = Path(path)
    run = path.parent.parent
    m = STEP_DIR.match(path.name)
    if not m or path.parent.name not in ("policy", "checkpoints") or not (run / "config.yaml").is_file():
        return "restore it from where it came from, or delete it and re-run the stage that writes it"
    step = int(m.group(1))
    if path.parent.name == "checkpoints":
        source = f"the snapshot stage copies it again from policy/step_{step:06d}"
    elif step == 0:
        source = "the prepare stage saves θ_0 again from the base model"
    else:
        source = f"the update of iteration {step - 1} redoes it from policy/step_{step - 1:06d}"
    return (
        f"re-run `ts train --run-id {run.name}` with the run's preset and --set values "
        f"(resume removes the damaged step and {source}); `ts check {run.name}` lists all damage"
    )


def list_checkpoints(root: Path) -> list[CheckpointInfo]:
    """All checkpoints under root, sorted by step. Temp dirs and other entries are ignored.

    Reads manifests only (cheap); hashes are checked when a checkpoint is loaded. A missing root
    means no checkpoints yet and gives [].
    """
    root = Path(root)
    if not root.is_dir():
        return []
    infos = [read_manifest(p) for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name)]
    return sorted(infos, key=lambda i: i.step)
