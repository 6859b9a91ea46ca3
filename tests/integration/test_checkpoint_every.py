"""checkpoint.every: θ in memory between checkpoints, checkpoints on a schedule, resume by replay.

One tiny in-process run of 4 iterations with checkpoint.every=2 and pool.snapshot_every=3: policy
checkpoints at 0, 2 (every), 3 (a pool snapshot) and 4 (the end); θ_1 exists only in memory. The
engine samples θ_1 from the trainer's tensors; a run whose later outputs are lost replays update 0
from θ_0 and the stored rollouts and ends bit for bit where the uninterrupted run did.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.helpers.resume import _same_state, _state
from tests.helpers.tiny import MOVING, copy_tree
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.export import ExportError, export_policy
from thinking_seeds.pipeline.loop import run_prepare, run_stage, train
from thinking_seeds.pipeline.policy_chain import checkpoint_steps, forget_run, resident, update_output_ok
from thinking_seeds.pipeline.session import Session
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.transports import live_weights

SCHEDULE = ["iterations=4", "pool.snapshot_every=3", "checkpoint.every=2"]


@pytest.fixture(scope="module")
def sparse_run(tmp_path_factory, tiny_overrides):
    overrides = tiny_overrides + MOVING + SCHEDULE
    cfg = load_config("tiny", overrides)
    run = train(RunDir.for_run("sparse", tmp_path_factory.mktemp("sparse")), cfg)
    return run, cfg, overrides


def test_checkpoint_schedule(sparse_run):
    run, cfg, _ = sparse_run
    assert checkpoint_steps(run) == [0, 2, 3, 4]  # every 2, the snapshot at 3, the end
    assert not run.policy(1).exists()
    assert [p.name for p in sorted(run.pool_root.glob("step_*"))] == ["step_000000", "step_000003"]
    # AdamW state only in the policy checkpoints (θ_0 has none), never in a pool snapshot
    optim = sorted(p.parent.name for p in run.root.rglob("optimizer.safetensors"))
    assert optim == ["step_000002", "step_000003", "step_000004"]
    assert all(p.is_relative_to(run.policy_root) for p in run.root.rglob("optimizer.safetensors"))
    for k in range(cfg.iterations):
        m = run.read_manifest(k, "update")
        assert "update" in m.hashes  # the metrics digest: what the chain of digests rests on
        assert ("policy" in m.outputs) == (k + 1 in (2, 3, 4))
        assert update_output_ok(run, m, k)
        # Background writes record no hash (the write may still run); the run's last one is written in
        # place (no CPU copy beside the trainer's state at the end), so its hash is in the manifest.
        assert ("policy" in m.hashes) == (k + 1 == cfg.iterations)
    info = run.policy(2) / "manifest.json"
    assert '"policy_id"' in info.read_text()


def test_export_names_the_steps_with_a_checkpoint(sparse_run, tmp_path):
    run, _, _ = sparse_run
    with pytest.raises(ExportError, match=r"step 1 .* has no checkpoint.*steps with a checkpoint: \[0, 2, 3, 4\]"):
        export_policy(run, 1, tmp_path / "out")
    assert (export_policy(run, 3, tmp_path / "out3") / "model.safetensors").is_file()


def test_engine_weights_equal_the_trainers(sparse_run, tmp_path):
    """Update 0 of a fresh copy: θ_1 reaches the engine from memory, equal to the trainer's tensors."""
    ref, cfg, _ = sparse_run
    run = RunDir.for_run("sparse", tmp_path / "runs")
    run.acquire_lock()
    try:
        run_prepare(run, cfg)
        s = Session(run, cfg)
        for stage in ("snapshot", "seeds", "continuation", "verify", "update"):
            run_stage(s, stage, 0)
        assert not run.policy(1).exists()  # no file for the engine's sake
        s.use_weights(s.policy(1))
        trainer = resident(run).state.model.state_dict()
        engine = s.engine().model.state_dict()
        assert engine.keys() == trainer.keys()
        assert all(torch.equal(engine[k], trainer[k]) for k in trainer)
        w0 = read_table(ref.rollouts(0))  # the same rollouts as the reference: the copy is the same run
        assert read_table(run.rollouts(0)).equals(w0)
        assert any(not torch.equal(engine[k], _state(ref, 0)["model.safetensors"][0][k]) for k in trainer)
    finally:
        forget_run(run)
        run.release_lock()


def test_resume_replays_the_updates_since_the_newest_checkpoint(sparse_run, tmp_path):
    """Lose everything after verify 1 (θ_1 was never on disk, θ_2's checkpoint gone): the resumed run
    replays update 0 from θ_0 and its stored rollouts, and ends with the uninterrupted run's results."""
    ref, cfg, _ = sparse_run
    run = RunDir(copy_tree(ref.root, tmp_path / "runs" / "sparse"))
    for stage in ("update", "evaluate"):
        run.manifest_path(1, stage).unlink()
    for k in (2, 3):
        shutil.rmtree(run.manifest_path(k, "seeds").parent)
    for step in (2, 3, 4):
        shutil.rmtree(run.policy(step))
    shutil.rmtree(run.pool_root / "step_000003")
    live_weights.clear()
    continued = []
    train(run, cfg, on_stage=lambda k, st, m: continued.append((k, st, m.metrics.get("checkpoint/replayed"))))
    assert checkpoint_steps(run) == [0, 2, 3, 4]
    for step in (2, 3, 4):
        assert _same_state(_state(run, step), _state(ref, step)), f"θ_{step} differs from the uninterrupted run"
    assert (1, "update", 1.0) in continued  # θ_1 came back by replaying update 0
    for k in range(cfg.iterations):
        assert read_table(run.rollouts(k)).equals(read_table(ref.rollouts(k)))
        assert read_table(run.prefixes(k)).equals(read_table(ref.prefixes(k)))
        assert run.read_manifest(k, "update").hashes["update"] == ref.read_manifest(k, "update").hashes["update"]


def test_kill_during_the_checkpoint_write_redoes_the_update(sparse_run, tmp_path, monkeypatch):
    """A write that dies before its rename leaves the previous checkpoint the newest complete one, the
    update's manifest not done, and a resumed run writes it again (the same bytes' tensors)."""
    import os

    ref, cfg, _ = sparse_run
    run = RunDir(copy_tree(ref.root, tmp_path / "runs" / "sparse"))
    # θ_3 (a pool snapshot) is written in the background; the run's last checkpoint, θ_4, in place.
    shutil.rmtree(run.policy(3))  # as a kill in θ_3's write leaves it (its temp folder is removed on takeover)
    (run.policy_root / ".tmp_step_000003_x").mkdir()
    m = run.read_manifest(2, "update")
    assert not update_output_ok(run, m, 2)
    assert checkpoint_steps(run) == [0, 2, 4]
    real_rename = os.rename
    renamed = []
    monkeypatch.setattr(os, "rename", lambda a, b: (renamed.append(b), real_rename(a, b))[1])
    live_weights.clear()
    train(run, cfg)
    assert str(run.policy(3)) in map(str, renamed)
    assert not (run.policy_root / ".tmp_step_000003_x").exists()
    assert _same_state(_state(run, 3), _state(ref, 3))
    assert _same_state(_state(run, 4), _state(ref, 4))
