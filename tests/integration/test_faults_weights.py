"""Fault injection on weights (issue #11, item 1): nothing corrupt is ever loaded, and resume redoes a
damaged step. Flip a byte, truncate, delete -- in a policy step and in its hard-linked pool snapshot."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.helpers.tiny import copy_run
from thinking_seeds.engine.models import load_model
from thinking_seeds.engine.rollout import HFEngine
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store import checkpoints
from thinking_seeds.store.checkpoints import CheckpointError, save_checkpoint, verify_checkpoint


def flip_byte(path: Path, offset: int | None = None) -> None:
    """Flip one byte in place (same size, same inode: what bit rot or a bad copy does)."""
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0xFF
    with open(path, "r+b") as f:
        f.write(data)


def truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 3)


@pytest.fixture
def run_ckpt(tmp_path, tiny_model_dir) -> Path:
    """policy/step_000001 of a run directory (a config.yaml marks the run)."""
    root = tmp_path / "runs" / "w"
    root.mkdir(parents=True)
    (root / "config.yaml").write_text("seed: 0\n")
    model, tok = load_model(tiny_model_dir)
    return save_checkpoint(model, tok, root / "policy", 1)


@pytest.mark.parametrize("damage", [flip_byte, truncate, os.remove])
def test_loaders_refuse_damaged_weights_in_one_line(run_ckpt, damage, tiny_model_dir):
    weights = run_ckpt / "model.safetensors"
    model, tok = load_model(tiny_model_dir)
    engine = HFEngine(model, tok)
    damage(weights)
    for load in (load_model, engine.load_weights):
        with pytest.raises(CheckpointError) as e:
            load(run_ckpt)
        msg = str(e.value)
        assert "\n" not in msg
        assert str(run_ckpt) in msg and "model.safetensors" in msg
        assert "ts train --run-id w" in msg and "policy/step_000000" in msg  # the command, and from which step


def test_verification_is_cached_by_file_state(run_ckpt, monkeypatch):
    calls = []
    real = checkpoints._sha256
    monkeypatch.setattr(checkpoints, "_sha256", lambda p: calls.append(p) or real(p))
    checkpoints.verified(run_ckpt)
    n = len(calls)
    assert n > 0
    checkpoints.verified(run_ckpt)
    assert len(calls) == n  # same files, same state: not hashed again
    flip_byte(run_ckpt / "model.safetensors")
    with pytest.raises(CheckpointError, match="corrupt: model.safetensors"):
        checkpoints.verified(run_ckpt)  # an in-place edit changes mtime: hashed again, and refused


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("where", ["policy_flip", "snapshot_flip", "policy_truncate", "policy0_delete"])
def test_resume_redoes_a_damaged_step(runs_dir, tiny_run, where):
    """Damage a finished run's weights (a copy of the session's tiny run, hard links kept); `train`
    again must notice, redo the step, and end with the same weights as before the damage
    (everything is deterministic in the seed)."""
    cfg = tiny_run.cfg
    run = copy_run(tiny_run.run, runs_dir)
    final = run.policy(cfg.iterations) / "model.safetensors"
    before = _sha(final)
    target = {
        "policy_flip": run.policy(1) / "model.safetensors",
        "snapshot_flip": run.pool_root / "step_000001" / "model.safetensors",  # hard link to policy/step_1
        "policy_truncate": run.policy(1) / "optimizer.safetensors",
        "policy0_delete": run.policy(0) / "tokenizer.json",
    }[where]
    {"policy_flip": flip_byte, "snapshot_flip": flip_byte, "policy_truncate": truncate, "policy0_delete": os.remove}[
        where
    ](target)
    with pytest.raises(CheckpointError):
        verify_checkpoint(target.parent)
    train(run, cfg)
    for step in range(cfg.iterations + 1):
        verify_checkpoint(run.policy(step))
    for snap in sorted(run.pool_root.glob("step_*")):
        verify_checkpoint(snap)
    assert _sha(final) == before
    assert not [p for p in run.root.rglob(".old_*")]  # the damaged copy is gone too


def test_ts_check_names_the_damage_and_the_stage_to_redo(runs_dir, tiny_run):
    from typer.testing import CliRunner

    from thinking_seeds.flows.cli import app

    cfg = tiny_run.cfg
    run = copy_run(tiny_run.run, runs_dir)
    rid = run.run_id
    cli = CliRunner()
    res = cli.invoke(app, ["check", rid])
    assert res.exit_code == 0 and f"run {rid} is intact" in res.output and "lock: free" in res.output, res.output
    flip_byte(run.pool_root / "step_000001" / "model.safetensors")  # hard link: policy/step_000001 too
    truncate(run.rollouts(1))
    (run.root / "policy" / ".tmp_step_000009_x").mkdir()
    res = cli.invoke(app, ["check", rid])
    out = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert "checkpoints/step_000001 is damaged" in out and "redo snapshot of iteration 1" in out
    assert "policy/step_000001 is damaged" in out and "redo update of iteration 0" in out
    assert "rollouts.parquet no longer hashes" in out and "redo verify of iteration 1" in out
    assert f"ts train --run-id {rid}" in out and ".tmp_step_000009_x was left by a killed writer" in out
    train(run, cfg)
    res = cli.invoke(app, ["check", rid])
    assert res.exit_code == 0, res.output
    assert cli.invoke(app, ["check", "nope"]).exit_code == 2
