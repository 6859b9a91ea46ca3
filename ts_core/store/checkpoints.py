"""Policy checkpoints and the historical pool (SPEC §2.1).

A checkpoint is a Hugging Face directory `root/step_{step:06d}/` holding safetensors weights, the
config, the tokenizer, optionally `optimizer.safetensors`, and `manifest.json`:

    {"step", "created_at", "param_count", "sha256": {file: hex digest, every file}, "extra"}

Why so strict:
- weights are only ever safetensors: unpickling a .bin/.pt file can run arbitrary code, and a
  checkpoint directory is exactly the kind of thing that gets copied between machines;
- a checkpoint appears atomically (written into a temp dir inside root, then renamed), so a crash
  mid-save never leaves a half-written `step_*` that the pool would pick as a historical policy;
- every file is hashed, so a truncated copy is caught at load time instead of as a silent
  "historical policy" of garbage.

transformers is imported lazily: the pool logic (used by every seeds task) needs none of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
import torch

from thinking_seeds.store.parquet_io import shareable

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "MANIFEST_NAME",
    "OPTIMIZER_NAME",
    "CheckpointError",
    "CheckpointInfo",
    "HistoricalPool",
    "PickRule",
    "checkpoint_dir",
    "list_checkpoints",
    "load_checkpoint",
    "load_optimizer_state",
    "save_checkpoint",
    "save_optimizer_state",
    "rebuild_hint",
    "verified",
    "verify_checkpoint",
]

MANIFEST_NAME = "manifest.json"
OPTIMIZER_NAME = "optimizer.safetensors"
_PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_STEP_DIR = re.compile(r"^step_(\d{6,})$")
_OPTIMIZER_FORMAT = "thinking-seeds/optimizer-v1"

PickRule = Literal["uniform", "recent", "oldest"]


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


# --- save -------------------------------------------------------------------


def save_checkpoint(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    root: Path,
    step: int,
    extra: dict | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `root/step_{step:06d}/` atomically and return its path.

    Args:
        model, tokenizer: a transformers causal LM and its tokenizer (saved with save_pretrained).
        root: the run's checkpoints directory; created if missing.
        step: training step (iteration) of the policy; 0 = the initial model.
        extra: JSON-serialisable facts to keep in the manifest (config hash, metrics, ...).
        optimizer: if given, its state is saved as optimizer.safetensors (see save_optimizer_state)
            inside the same atomic directory, hashed like the weights.
        overwrite: replace an existing checkpoint of this step instead of failing.
    """
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"save_checkpoint: step must be an int >= 0, got {step!r}")
    extra = dict(extra or {})
    try:
        json.dumps(extra)
    except TypeError as e:
        raise TypeError(f"save_checkpoint: `extra` must be JSON-serialisable ({e}); convert values to str/number") from e
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir(root, step)
    if final.exists() and not overwrite:
        raise FileExistsError(
            f"checkpoint {final} already exists; load it, or pass overwrite=True to replace it"
        )

    # The temp dir lives in root so the final rename stays on one file system (atomic).
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp_step_{step:06d}_", dir=root))
    try:
        shareable(tmp)  # mkdtemp makes 0700; the published step_* must follow the umask
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if optimizer is not None:
            save_optimizer_state(optimizer, tmp / OPTIMIZER_NAME)
        _refuse_pickled(tmp)  # a transformers that fell back to pickle must not slip through
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        if not any(p.suffix == ".safetensors" for p in files):
            raise CheckpointError(f"save_pretrained wrote no .safetensors weights into {tmp}; files: {[p.name for p in files]}")
        manifest = {
            "step": step,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "param_count": sum(p.numel() for p in model.parameters()),
            "sha256": {p.relative_to(tmp).as_posix(): _sha256(p) for p in files},
            "extra": extra,
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        for p in tmp.rglob("*"):
            if p.is_file():
                shareable(p)  # safetensors writes 0600 whatever the umask
                _fsync(p)
        _publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(root)
    return final


def snapshot_checkpoint(src: Path, root: Path, step: int, extra: dict | None = None) -> Path:
    """Copy a verified checkpoint's model files (not its optimizer state) to root/step_{step}.

    The pool's snapshots are the policy's own weights: hard links (a copy across file systems)
    instead of a model load and save. Files are never modified in place (a re-save writes new
    files and renames), so sharing inodes is safe. Atomic like save_checkpoint.
    """
    src_info = verify_checkpoint(Path(src))
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp_step_{step:06d}_", dir=root))
    try:
        shareable(tmp)  # mkdtemp makes 0700; the published step_* must follow the umask
        for rel in src_info.sha256:
            if rel in (OPTIMIZER_NAME, MANIFEST_NAME):
                continue
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(Path(src) / rel, dst)
            except OSError:
                shutil.copy2(Path(src) / rel, dst)
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        manifest = {
            "step": step,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "param_count": src_info.param_count,
            "sha256": {p.relative_to(tmp).as_posix(): src_info.sha256[p.relative_to(tmp).as_posix()] for p in files},
            "extra": dict(extra or {}),
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        _fsync(tmp / MANIFEST_NAME)
        _publish(tmp, checkpoint_dir(root, step))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(root)
    return checkpoint_dir(root, step)


def _publish(tmp: Path, final: Path) -> None:
    """Rename tmp -> final; an existing final is first moved aside so readers never see a mix."""
    if not final.exists():
        os.rename(tmp, final)
        return
    old = Path(tempfile.mkdtemp(prefix=f".old_{final.name}_", dir=final.parent))
    os.replace(final, old / final.name)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _refuse_pickled(path: Path) -> None:
    pickled = sorted(p.name for p in path.rglob("*") if p.is_file() and p.suffix in _PICKLED_SUFFIXES)
    if pickled:
        raise CheckpointError(
            f"checkpoint {path} holds pickled files {pickled}; thinking-seeds loads weights only as "
            f"safetensors because unpickling can run arbitrary code. Re-save the model with "
            f"save_pretrained (safetensors is the default) and remove the pickled files."
        )


# --- read / verify / load ---------------------------------------------------


def _read_manifest(path: Path) -> CheckpointInfo:
    manifest_path = path / MANIFEST_NAME
    if not manifest_path.is_file():
        raise CheckpointError(f"checkpoint {path} has no {MANIFEST_NAME}; it was not written by save_checkpoint: {rebuild_hint(path)}")
    try:
        m = json.loads(manifest_path.read_text())
        info = CheckpointInfo(
            path=path,
            step=int(m["step"]),
            created_at=str(m["created_at"]),
            param_count=int(m["param_count"]),
            sha256=dict(m["sha256"]),
            extra=dict(m.get("extra") or {}),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path} has an unreadable {MANIFEST_NAME} ({e!r}): {rebuild_hint(path)}") from e
    match = _STEP_DIR.match(path.name)
    if match and int(match.group(1)) != info.step:
        raise CheckpointError(
            f"checkpoint {path} is named for step {int(match.group(1))} but its manifest says step {info.step}: {rebuild_hint(path)}"
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
    m = _STEP_DIR.match(path.name)
    if not m or path.parent.name not in ("policy", "checkpoints") or not (run / "config.yaml").is_file():
        return "restore it from where it came from, or delete it and re-run the stage that writes it"
    step = int(m.group(1))
    if path.parent.name == "checkpoints":
        source = f"the snapshot stage copies it again from policy/step_{step:06d}"
    elif step == 0:
        source = "the prepare stage saves θ_0 again from the base model"
    else:
        source = f"the update of iteration {step - 1} redoes it from policy/step_{step - 1:06d}"
    return (f"re-run `ts train --run-id {run.name}` with the run's preset and --set values "
            f"(resume removes the damaged step and {source}); `ts check {run.name}` lists all damage")


def list_checkpoints(root: Path) -> list[CheckpointInfo]:
    """All checkpoints under root, sorted by step. Temp dirs and other entries are ignored.

    Reads manifests only (cheap); hashes are checked when a checkpoint is loaded. A missing root
    means no checkpoints yet and gives [].
    """
    root = Path(root)
    if not root.is_dir():
        return []
    infos = [_read_manifest(p) for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)]
    return sorted(infos, key=lambda i: i.step)


def verify_checkpoint(path: Path) -> CheckpointInfo:
    """Check a checkpoint against its manifest; raise CheckpointError naming the first bad file.

    Fails on: a missing directory or manifest, pickled weight files, files listed in the manifest
    that are missing, a sha256 mismatch, and .safetensors files the manifest does not vouch for
    (transformers would load them unverified).
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist or is not a directory; check the path or list_checkpoints(root)")
    _refuse_pickled(path)
    info = _read_manifest(path)
    if not any(name.endswith(".safetensors") for name in info.sha256):
        raise CheckpointError(f"checkpoint {path} lists no .safetensors weights in its manifest: {rebuild_hint(path)}")
    for name, expected in sorted(info.sha256.items()):
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} (listed in the manifest) is missing; {rebuild_hint(path)}")
        actual = _sha256(file)
        if actual != expected:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {name} sha256 {actual} != manifest {expected}; {rebuild_hint(path)}"
            )
    unlisted = sorted(
        p.relative_to(path).as_posix()
        for p in path.rglob("*.safetensors")
        if p.relative_to(path).as_posix() not in info.sha256
    )
    if unlisted:
        raise CheckpointError(f"checkpoint {path} holds weight files not in its manifest {unlisted}; {rebuild_hint(path)}")
    return info


_VERIFIED: dict[str, tuple[tuple, CheckpointInfo]] = {}  # resolved dir -> (file signature, info)


def _signature(path: Path) -> tuple:
    """(name, inode, size, mtime) of every file: any rewrite, truncation or in-place edit changes it."""
    out = []
    for p in sorted(path.rglob("*")):
        if p.is_file():
            st = p.stat()
            out.append((p.relative_to(path).as_posix(), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def verified(path: Path) -> CheckpointInfo:
    """verify_checkpoint, hashing each on-disk state once per process.

    Every loader goes through this, so nothing corrupt is ever loaded; the cache (keyed by each
    file's inode, size and mtime) keeps weight swaps between pool checkpoints from re-hashing the
    same bytes every iteration.
    """
    path = Path(path)
    if not path.is_dir():
        return verify_checkpoint(path)  # raises the one-line "does not exist"
    key = str(path.resolve())
    sig = _signature(path)
    hit = _VERIFIED.get(key)
    if hit is not None and hit[0] == sig:
        return hit[1]
    info = verify_checkpoint(path)
    _VERIFIED[key] = (sig, info)
    return info


def load_checkpoint(
    path: Path, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Verify, then load (model, tokenizer) from a checkpoint: safetensors only, no network, no remote code."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    verified(path)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, use_safetensors=True, local_files_only=True, trust_remote_code=False
    )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    return model, tokenizer


# --- optimizer state --------------------------------------------------------


def save_optimizer_state(optimizer: torch.optim.Optimizer, path: Path) -> None:
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
                raise ValueError(f"optimizer state key {key!r} (param {idx}) contains '.', which the flat naming reserves")
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
        "optimizer": type(optimizer).__name__,
        "param_groups": groups,
        "scalar_state": json.dumps(scalars),
    }
    path = Path(path)
    tmp = path.with_name(f".tmp_{path.name}")
    save_file(tensors, str(tmp), metadata=metadata)
    os.replace(tmp, path)


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
        raise CheckpointError(f"{path} is not an optimizer state written by save_optimizer_state (format {meta.get('format')!r})")
    if meta["optimizer"] != type(optimizer).__name__:
        raise CheckpointError(
            f"{path} holds {meta['optimizer']} state but the optimizer is {type(optimizer).__name__}; build the same optimizer class"
        )
    groups = json.loads(meta["param_groups"])
    current = optimizer.param_groups
    saved_sizes, current_sizes = [len(g["params"]) for g in groups], [len(g["params"]) for g in current]
    if saved_sizes != current_sizes:
        raise CheckpointError(
            f"{path} has param groups of sizes {saved_sizes} but the optimizer has {current_sizes}; "
            f"build the optimizer over the same model parameters, in the same order"
        )
    for saved, cur in zip(groups, current):
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


# --- the historical pool ----------------------------------------------------


class HistoricalPool:
    """Which checkpoints may write seeds, and which one writes the next (config `pool.*`).

    Args:
        size: how many of the most recent snapshots older than the current policy are members.
        include_initial: the step-0 checkpoint (the initial model) is always a member, in addition
            to the `size` most recent when it is not already one of them (so up to size + 1).
        pick: 'uniform' (random member), 'recent' (the newest), 'oldest' (the oldest).
    """

    def __init__(self, size: int, include_initial: bool = False, pick: PickRule = "uniform") -> None:
        if pick not in get_args(PickRule):
            raise ValueError(f"pool.pick must be one of {list(get_args(PickRule))}, got {pick!r}")
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"pool.size must be an int >= 0, got {size!r}")
        if size == 0 and not include_initial:
            raise ValueError("pool.size is 0 and pool.include_initial is false: the pool could never hold a checkpoint")
        self.size = size
        self.include_initial = include_initial
        self.pick_rule: PickRule = pick

    def __repr__(self) -> str:
        return f"HistoricalPool(size={self.size}, include_initial={self.include_initial}, pick={self.pick_rule!r})"

    def members(self, checkpoints: Sequence[CheckpointInfo], current_step: int) -> list[CheckpointInfo]:
        """Members for the policy at `current_step`, sorted by step (may be empty).

        Only checkpoints strictly older than current_step qualify: the checkpoint of the current
        policy itself is never historical, and a checkpoint from a later step (left over from a run
        resumed at an earlier step) is not this policy's history.
        """
        steps = [c.step for c in checkpoints]
        if len(set(steps)) != len(steps):
            raise ValueError(f"duplicate checkpoint steps in {sorted(steps)}; pass each checkpoint once")
        older = sorted((c for c in checkpoints if c.step < current_step), key=lambda c: c.step)
        chosen = older[-self.size :] if self.size > 0 else []
        if self.include_initial and current_step > 0 and (not chosen or chosen[0].step != 0):
            if not older or older[0].step != 0:
                raise ValueError(
                    f"pool.include_initial is set but there is no step-0 checkpoint among steps {steps}; "
                    f"save the initial model with save_checkpoint(..., step=0) before training, or set "
                    f"pool.include_initial to false"
                )
            chosen = [older[0], *chosen]
        return chosen

    def pick(self, members: Sequence[CheckpointInfo], rng: random.Random | np.random.Generator) -> CheckpointInfo:
        """Choose the checkpoint that writes one seed, by the pool's pick rule."""
        if not members:
            raise ValueError(
                "the historical pool is empty: no checkpoint is older than the current policy. Snapshot "
                "before the first seeded iteration (save step 0 and set pool.include_initial), snapshot "
                "more often (pool.snapshot_every), or start seeding after the first snapshot"
            )
        ordered = sorted(members, key=lambda c: c.step)  # the same rng gives the same pick whatever the input order
        if self.pick_rule == "recent":
            return ordered[-1]
        if self.pick_rule == "oldest":
            return ordered[0]
        if isinstance(rng, random.Random):
            return ordered[rng.randrange(len(ordered))]
        if isinstance(rng, np.random.Generator):
            return ordered[int(rng.integers(len(ordered)))]
        raise TypeError(f"rng must be random.Random or numpy.random.Generator, got {type(rng).__name__}")

    def select(
        self, checkpoints: Sequence[CheckpointInfo], current_step: int, rng: random.Random | np.random.Generator
    ) -> CheckpointInfo:
        """members() then pick(), with the step in the error when the pool is empty."""
        members = self.members(checkpoints, current_step)
        if not members:
            raise ValueError(
                f"the historical pool is empty at step {current_step} (checkpoints at steps "
                f"{sorted(c.step for c in checkpoints)}); the current policy is never historical. Save step 0 "
                f"and set pool.include_initial, snapshot more often (pool.snapshot_every), or start seeding later"
            )
        return self.pick(members, rng)
