"""A warm-up that survives being killed: periodic state saves and a bit-exact resume.

A long base-model build (hours on one core) outlives a session. Every `save_every` steps the warm-up
writes everything its next step depends on: the weights, AdamW's moments, the lr schedule's
position, the batch sampler's generator, torch's global RNG, the evaluations so far, the elapsed
time. `--resume` loads it and continues at the next step, so a build cut at any save and resumed
ends with the same weights as one that ran through (tests/unit/test_warmup_resume.py).

The state also records the settings and a digest of the encoded corpus; a resume with other
settings (or code that builds another corpus) is refused rather than silently continued.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

import torch

__all__ = ["STATE_FILE", "ResumeError", "corpus_digest", "load_state", "restore", "save_state"]

STATE_FILE = "state.pt"


class ResumeError(ValueError):
    """A --resume that cannot continue this build (no state, other settings, another corpus)."""


def corpus_digest(ids: torch.Tensor, labels: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in (ids, labels):
        h.update(str(tuple(t.shape)).encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def save_state(state_dir: Path, *, step: int, model, opt, sched, gen: torch.Generator, extra: dict[str, Any]) -> Path:
    """Write the resumable state atomically (a kill during the write leaves the previous one)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "step": step,
        "model": model.state_dict(),
        "opt": opt.state_dict(),
        "sched": sched.state_dict(),
        "gen": gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        # plain JSON values (numpy scalars become floats): load_state reads with weights_only=True
        **json.loads(json.dumps(extra, default=float)),
    }
    tmp = state_dir / (STATE_FILE + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, state_dir / STATE_FILE)
    return state_dir / STATE_FILE


def load_state(state_dir: Path, *, settings: dict[str, Any], digest: str) -> dict[str, Any]:
    """The saved state, after checking it belongs to this build (same settings, same corpus)."""
    path = state_dir / STATE_FILE
    if not path.is_file():
        raise ResumeError(f"--resume: no {STATE_FILE} in {state_dir}; start the build without --resume")
    try:  # weights_only: tensors and plain containers only; a crafted pickle is refused, never run
        state = torch.load(path, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ResumeError(
            f"--resume: {path} is not a warm-up state this code wrote ({first[:200]}); it is not loaded: "
            "start the build without --resume"
        ) from None
    diff = {k: (state["settings"].get(k), v) for k, v in settings.items() if state["settings"].get(k) != v}
    if diff:
        raise ResumeError(
            f"--resume: {path} was saved by a build with other settings {diff} (saved, now); "
            "resume with the original command line"
        )
    if state["corpus_digest"] != digest:
        raise ResumeError(f"--resume: the warm-up corpus differs from the one {path} was trained on (code changed?)")
    return state


def restore(state: dict[str, Any], *, model, opt, sched, gen: torch.Generator) -> int:
    """Put the saved state back; returns the step to run next."""
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    sched.load_state_dict(state["sched"])
    gen.set_state(state["gen"])
    torch.set_rng_state(state["torch_rng"])
    return int(state["step"]) + 1
