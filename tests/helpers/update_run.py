"""A run stopped before its first update, for the update-stage tests: the `verified_run` fixture
(`make_verified_run`) and the device tests' `verified_session`.

The rollouts come from a real tiny run up to the verify stage; their advantages are replaced with
random ones (a random-weights model earns no reward, and the trainer only reads advantages).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import torch
from safetensors.torch import load_file

from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import run_prepare, run_stage
from thinking_seeds.pipeline.session import Session
from thinking_seeds.pipeline.stage_update import update
from thinking_seeds.pipeline.trainer_client import close_trainers
from thinking_seeds.store.parquet_io import read_table, write_table_atomic
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import ROLLOUT_SCHEMA

# The device tests' update: two mini-batches of 8-sequence micro-batches.
DEVICE_UPDATE = ["update.micro_batch_size=8", "update.mini_batches=2", "update.lr=1e-3"]
# Two mini-batches of 4-sequence micro-batches: several optimizer steps and gradient accumulation.
UPDATE = ["update.micro_batch_size=4", "update.mini_batches=2", "update.lr=1e-3", "loss.entropy_coeff=0.01"]


def make_verified_run(base: Path, tiny_overrides: list[str]) -> tuple[RunDir, object]:
    """A run directory under `base` holding θ_0 and iteration 0's rollouts, with random non-zero
    advantages, and its config."""
    cfg = load_config("tiny", tiny_overrides + UPDATE)
    run = RunDir.for_run("launch", base)
    run_prepare(run, cfg)
    s = Session(run, cfg)
    try:
        for stage in ("snapshot", "seeds", "continuation", "verify"):
            run_stage(s, stage, 0)
    finally:
        s.close()
    t = read_table(run.rollouts(0), ROLLOUT_SCHEMA)
    rng = random.Random(7)
    adv = pa.array([rng.uniform(-2.0, 2.0) for _ in range(t.num_rows)], pa.float32())
    t = t.set_column(t.schema.get_field_index("advantage"), "advantage", adv.cast(t.schema.field("advantage").type))
    write_table_atomic(t, run.rollouts(0), schema=ROLLOUT_SCHEMA)
    return run, cfg


def update_done(s: Session, k: int):
    """The update stage k with its background checkpoint on disk (the loop waits for it at the next
    snapshot or the run's end; a test reading θ_{k+1}'s files right after the stage waits here)."""
    from thinking_seeds.pipeline.policy_chain import flush_checkpoints

    m = update(s, k)
    flush_checkpoints(s.run, s.cfg)
    return m


def update_copy(run: RunDir, cfg, tmp_path, name: str, launcher: str, n: int) -> tuple[dict[str, torch.Tensor], dict]:
    """θ_1 (name -> tensor) and the update's metrics, from a copy of the run updated by `launcher`."""
    dst = RunDir(tmp_path / name / run.run_id)
    shutil.copytree(run.root, dst.root)
    c = cfg.model_copy(deep=True)
    c.update.launcher, c.update.num_processes = launcher, n
    try:
        m = update_done(Session(dst, c), 0)
    finally:
        close_trainers()  # launcher=accelerate: the copy's persistent trainer
    assert m.outputs["policy"] == "policy/step_000001"
    assert m.metrics["perf/num_processes"] == n
    return load_file(str(dst.policy(1) / "model.safetensors")), m.metrics


def verified_session(tmp_path: Path, overrides: list[str]) -> tuple[RunDir, object, Session]:
    """Run `dev` under `tmp_path` up to iteration 0's verify stage, with random advantages, and its
    config and still open Session (close it)."""
    cfg = load_config("tiny", overrides)
    run = RunDir.for_run("dev", tmp_path)
    run_prepare(run, cfg)
    s = Session(run, cfg)
    for stage in ("snapshot", "seeds", "continuation", "verify"):
        run_stage(s, stage, 0)
    # A random-weights model earns no reward: random advantages, so the update has a gradient.
    t = read_table(run.rollouts(0), ROLLOUT_SCHEMA)
    rng = random.Random(7)
    adv = pa.array([rng.uniform(-2.0, 2.0) for _ in range(t.num_rows)], pa.float32())
    t = t.set_column(t.schema.get_field_index("advantage"), "advantage", adv.cast(t.schema.field("advantage").type))
    write_table_atomic(t, run.rollouts(0), schema=ROLLOUT_SCHEMA)
    return run, cfg, s
