"""Policy checkpoints (docs/algorithm.md §2.1): writing, verifying and loading them.

Why so strict:
- weights are only ever safetensors: unpickling a .bin/.pt file can run arbitrary code, and a
  checkpoint directory is exactly the kind of thing that gets copied between machines;
- a checkpoint appears atomically (written into a temp dir inside root, then renamed), so a crash
  mid-save never leaves a half-written `step_*` that the pool would pick as a historical policy;
- every file is hashed, so a truncated copy is caught at load time instead of as a silent
  "historical policy" of garbage.

This module writes, verifies and loads checkpoints. What a checkpoint directory is (its files, the
manifest, CheckpointError) lives in `store.checkpoint_format` and is re-exported here, as the one
place to import checkpoint I/O from; the optimizer state is `store.optimizer_state`, the pool that
picks seed writers `store.historical_pool`. transformers is imported lazily.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from thinking_seeds.store.atomic import shareable
from thinking_seeds.store.checkpoint_format import (
    MANIFEST_NAME,
    OPTIMIZER_NAME,
    CheckpointError,
    CheckpointInfo,
    checkpoint_dir,
    list_checkpoints,
    read_manifest,
    rebuild_hint,
)
from thinking_seeds.store.contained import bounded_hash, inside
from thinking_seeds.store.optimizer_state import OptimizerSnapshot, save_optimizer_state
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.weights_check import check_shapes, model_shapes, read_header

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "MODEL_LOAD_LOCK",
    # re-exported from store.checkpoint_format: the checkpoint directory's names and reading
    "MANIFEST_NAME",
    "OPTIMIZER_NAME",
    "CheckpointError",
    "CheckpointInfo",
    "checkpoint_dir",
    "list_checkpoints",
    "rebuild_hint",
    # defined here
    "FrozenModel",
    "check_model_dir",
    "cpu_state_dict",
    "load_checkpoint",
    "save_checkpoint",
    "snapshot_checkpoint",
    "verified",
    "verify_checkpoint",
]

_PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


# --- save -------------------------------------------------------------------


def save_checkpoint(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    root: Path,
    step: int,
    extra: dict | None = None,
    *,
    optimizer: torch.optim.Optimizer | OptimizerSnapshot | None = None,
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

    A background write passes a `FrozenModel` (CPU copies taken before the model trains on) and an
    OptimizerSnapshot.
    """
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"save_checkpoint: step must be an int >= 0, got {step!r}")
    extra = dict(extra or {})
    try:
        json.dumps(extra)
    except TypeError as e:
        raise TypeError(
            f"save_checkpoint: `extra` must be JSON-serialisable ({e}); convert values to str/number"
        ) from e
    final = checkpoint_dir(root, step)
    if final.exists() and not overwrite:
        raise FileExistsError(f"checkpoint {final} already exists; load it, or pass overwrite=True to replace it")

    def fill(tmp: Path) -> tuple[int, dict[str, str]]:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if optimizer is not None:
            save_optimizer_state(optimizer, tmp / OPTIMIZER_NAME)
        _refuse_pickled(tmp)  # a transformers that fell back to pickle must not slip through
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        if not any(p.suffix == ".safetensors" for p in files):
            raise CheckpointError(
                f"save_pretrained wrote no .safetensors weights into {tmp}; files: {[p.name for p in files]}"
            )
        for p in files:
            shareable(p)  # safetensors writes 0600 whatever the umask
            _fsync(p)
        count = model.param_count if isinstance(model, FrozenModel) else sum(p.numel() for p in model.parameters())
        return count, {p.relative_to(tmp).as_posix(): _sha256(p) for p in files}

    return _make_checkpoint(root, step, extra, fill)


def _make_checkpoint(root: Path, step: int, extra: dict, fill: Callable[[Path], tuple[int, dict[str, str]]]) -> Path:
    """Make root/step_{step:06d} atomically: `fill(tmp)` writes the files into a temp dir inside root (so
    the final rename stays on one file system) and returns (param_count, {file: sha256}); the manifest
    is written last. Any failure removes the temp dir."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp_step_{step:06d}_", dir=root))
    try:
        shareable(tmp)  # mkdtemp makes 0700; the published step_* must follow the umask
        param_count, sha256 = fill(tmp)
        manifest = {
            "step": step,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "param_count": param_count,
            "sha256": sha256,
            "extra": extra,
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        _fsync(tmp / MANIFEST_NAME)
        _publish(tmp, checkpoint_dir(root, step))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(root)
    return checkpoint_dir(root, step)


def cpu_state_dict(model) -> dict[str, torch.Tensor]:
    """A CPU copy of the model's state dict, taken now (the model may train on meanwhile). Tensors
    that share storage (tied embeddings) share their copy too, so save_pretrained sees them tied."""
    copies: dict[tuple, torch.Tensor] = {}
    out = {}
    for name, t in model.state_dict().items():
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
        if key not in copies:
            copies[key] = t.detach().to("cpu", copy=True)
        out[name] = copies[key]
    return out


class FrozenModel:
    """A model as it is now, on the CPU: weights, config and generation config copied, so a background
    thread can write it (save_checkpoint) while the live model trains on and flips its config."""

    def __init__(self, model) -> None:
        self.config = copy.deepcopy(model.config)
        self.config.use_cache = True  # as an eval-mode save writes it (the trainer is in train mode now)
        gen = getattr(model, "generation_config", None)
        self.generation_config = copy.deepcopy(gen) if gen is not None else None
        self.weights = cpu_state_dict(model)
        self.param_count = sum(p.numel() for p in model.parameters())

    def save_pretrained(self, directory: Path) -> None:
        """config.json, generation_config.json and model.safetensors (a tensor tied to an earlier one
        is left out, as save_pretrained does: from_pretrained ties it again)."""
        from safetensors.torch import save_file

        self.config.save_pretrained(directory)
        if self.generation_config is not None:
            self.generation_config.save_pretrained(directory)
        seen: set[int] = set()
        unique = {}
        for name, t in self.weights.items():
            if id(t) not in seen:
                seen.add(id(t))
                unique[name] = t
        save_file(unique, str(Path(directory) / "model.safetensors"), metadata={"format": "pt"})


def snapshot_checkpoint(src: Path, root: Path, step: int, extra: dict | None = None) -> Path:
    """Copy a verified checkpoint's model files (not its optimizer state) to root/step_{step}.

    The pool's snapshots are the policy's own weights: hard links (a copy across file systems)
    instead of a model load and save. Files are never modified in place (a re-save writes new
    files and renames), so sharing inodes is safe. Atomic like save_checkpoint.
    """
    src_info = verify_checkpoint(Path(src))

    def fill(tmp: Path) -> tuple[int, dict[str, str]]:
        for rel in src_info.sha256:
            if rel in (OPTIMIZER_NAME, MANIFEST_NAME):
                continue
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(Path(src) / rel, dst)
            except OSError:
                shutil.copy2(Path(src) / rel, dst)
        files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
        return src_info.param_count, {rel: src_info.sha256[rel] for rel in files}

    return _make_checkpoint(root, step, dict(extra or {}), fill)


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
    """The file's sha256, streamed and bounded (a FIFO, a device or a file over TS_MAX_FILE_GB is refused)."""
    try:
        return bounded_hash(path, follow=True)  # the caller checked that a link stays in the checkpoint
    except DataError as e:
        raise CheckpointError(str(e)) from None


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


# --- verify / load ---------------------------------------------------------


def verify_checkpoint(path: Path) -> CheckpointInfo:
    """Check a checkpoint against its manifest; raise CheckpointError naming the first bad file.

    Fails on: a missing directory or manifest, pickled weight files, files listed in the manifest
    that are missing, a sha256 mismatch, and .safetensors files the manifest does not vouch for
    (transformers would load them unverified).
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(
            f"checkpoint {path} does not exist or is not a directory; check the path or list_checkpoints(root)"
        )
    _refuse_pickled(path)
    info = read_manifest(path)
    if not any(name.endswith(".safetensors") for name in info.sha256):
        raise CheckpointError(f"checkpoint {path} lists no .safetensors weights in its manifest: {rebuild_hint(path)}")
    for name, expected in sorted(info.sha256.items()):
        file = inside(path, name)  # `../../x` or a link out of the checkpoint: refused before it is read
        if not file.is_file():
            raise CheckpointError(
                f"checkpoint {path} is incomplete: {name} (listed in the manifest) is missing; {rebuild_hint(path)}"
            )
        actual = _sha256(file)
        if actual != expected:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {name} sha256 {actual} != manifest {expected}; {rebuild_hint(path)}"
            )
        if name.endswith(".safetensors"):
            read_header(file)  # a pickle (or anything) named .safetensors, its manifest to match: refused
    unlisted = sorted(
        p.relative_to(path).as_posix()
        for p in path.rglob("*.safetensors")
        if p.relative_to(path).as_posix() not in info.sha256
    )
    if unlisted:
        raise CheckpointError(
            f"checkpoint {path} holds weight files not in its manifest {unlisted}; {rebuild_hint(path)}"
        )
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


def load_checkpoint(path: Path, dtype: torch.dtype = torch.float32) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Verify, then load (model, tokenizer) from a checkpoint: safetensors only, no network, no remote code."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    verified(path)
    check_model_dir(path)  # the shapes its config builds, from the headers, before from_pretrained
    with MODEL_LOAD_LOCK:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, use_safetensors=True, local_files_only=True, trust_remote_code=False
        )
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    return model, tokenizer


# One model load at a time per process. transformers' from_pretrained swaps class attributes of
# PreTrainedModel while it loads (transformers/initialization.py: no_tie_weights, no_init_weights):
# two loads in two threads (pipeline.overlap's seeds-ahead thread, Prefect's task threads) can each
# restore the other's swap and leave tie_weights a no-op for the rest of the process, after which
# every load of a model with tied embeddings has lm_head on the meta device ("Cannot copy out of
# meta tensor"). Every from_pretrained of ours (models, adapters) runs under this lock.
MODEL_LOAD_LOCK = threading.RLock()
_SHAPES: dict[str, dict[str, tuple[int, ...]]] = {}  # config.json's text -> its shapes (a few per process)


def expected_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """{name: shape} of the model `model_dir`'s config.json builds, built on the meta device (no memory),
    once per config: every pool member and policy step of a run shares one config.json, and the build
    grows with the model (seconds at 7B), so it is not paid per load.

    torch's device context is per thread (accelerate's init_empty_weights patches torch for every
    thread: a load in another thread then built its weights on meta), and transformers' class-level
    switches are shared, so the build holds MODEL_LOAD_LOCK like every from_pretrained of ours."""
    from transformers import AutoConfig, AutoModelForCausalLM

    key = (Path(model_dir) / "config.json").read_text(encoding="utf-8")
    if key not in _SHAPES:
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
        with MODEL_LOAD_LOCK, torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        if len(_SHAPES) >= 8:
            _SHAPES.clear()
        _SHAPES[key] = model_shapes(model)
    return _SHAPES[key]


def check_model_dir(model_dir: Path) -> None:
    """Every model .safetensors file of `model_dir` (not the optimizer state) is one, of the shapes its
    config.json builds: CheckpointError (one line) before from_pretrained reads a byte of it."""
    files = [f for f in sorted(Path(model_dir).glob("*.safetensors")) if f.name != "optimizer.safetensors"]
    for f in files:
        read_header(f)
    if files and (Path(model_dir) / "config.json").is_file() and not (Path(model_dir) / "adapter_config.json").exists():
        check_shapes(files, expected_shapes(Path(model_dir)))
