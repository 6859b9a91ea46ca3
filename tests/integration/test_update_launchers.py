"""The update stage gives the same θ_1 in process, under `accelerate launch` with one process, and
with two CPU processes (`--multi_gpu --num_processes 2` + `Accelerator(cpu=True)` = gloo DDP, SPEC §7).

The rollouts come from a real tiny run up to the verify stage; their advantages are replaced with
random ones (a random-weights model earns no reward, and the trainer only reads advantages).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import run_prepare, run_stage
from thinking_seeds.pipeline.stages import Session, accelerate_command, update
from thinking_seeds.store.parquet_io import read_table, write_table_atomic
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import ROLLOUT_SCHEMA

# Two mini-batches of 4-sequence micro-batches: several optimizer steps and gradient accumulation.
UPDATE = ["update.micro_batch_size=4", "update.mini_batches=2", "update.lr=1e-3", "loss.entropy_coeff=0.01"]


@pytest.fixture(scope="module")
def verified_run(tmp_path_factory, tiny_overrides):
    """A run directory holding θ_0 and iteration 0's rollouts, with random non-zero advantages."""
    base = tmp_path_factory.mktemp("launchers")
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


def _update_copy(run: RunDir, cfg, tmp_path, name: str, launcher: str, n: int) -> tuple[dict[str, torch.Tensor], dict]:
    """θ_1 (name -> tensor) and the update's metrics, from a copy of the run updated by `launcher`."""
    dst = RunDir(tmp_path / name / run.run_id)
    shutil.copytree(run.root, dst.root)
    c = cfg.model_copy(deep=True)
    c.update.launcher, c.update.num_processes = launcher, n
    m = update(Session(dst, c), 0)
    assert m.outputs["policy"] == "policy/step_000001"
    assert m.metrics["perf/num_processes"] == n
    return load_file(str(dst.policy(1) / "model.safetensors")), m.metrics


def test_accelerate_command_uses_gloo_ddp_on_cpu(verified_run, tmp_path):
    run, cfg = verified_run
    c = cfg.model_copy(deep=True)
    c.update.launcher, c.update.num_processes = "accelerate", 2
    cmd = accelerate_command(run, c, 0, tmp_path / "m.json", None)
    assert cmd[cmd.index("--num_processes") + 1] == "2" and "--multi_gpu" in cmd  # `--cpu` alone runs one
    assert "--cpu" in cmd[cmd.index("thinking_seeds.train.trainer") :]  # the trainer's flag: Accelerator(cpu=True)


def test_one_and_two_processes_match_in_process(verified_run, tmp_path):
    """Same θ_1, and the same statistics: with two processes every logged mean is over both
    processes' tokens and every maximum is the larger one (algo/stats.py), as in one process."""
    run, cfg = verified_run
    theta0 = load_file(str(run.policy(0) / "model.safetensors"))
    ref, ref_metrics = _update_copy(run, cfg, tmp_path, "in_process", "in_process", 1)
    assert any(not torch.equal(theta0[n], ref[n]) for n in ref), "the update did not move the weights"
    assert "actor/ratio_max/prefix" in ref_metrics and "actor/prefix_abs_log_ratio/age=0" in ref_metrics
    for name, n in (("accelerate1", 1), ("accelerate2", 2)):
        got, metrics = _update_copy(run, cfg, tmp_path, name, "accelerate", n)
        stats = {k for k in ref_metrics if k.startswith("actor/")}
        assert stats <= metrics.keys(), stats - metrics.keys()
        for key in sorted(stats):
            assert metrics[key] == pytest.approx(ref_metrics[key], rel=1e-4, abs=1e-6), f"{name}: {key}"
        assert got.keys() == ref.keys()
        worst = max(float((got[key] - ref[key]).abs().max()) for key in ref)
        print(f"{name}: max |Δθ| vs in_process = {worst:.3g}")
        for key in ref:
            # Float summation order differs (gloo all-reduce, sharded micro-batches): tolerance, not equality.
            torch.testing.assert_close(got[key], ref[key], rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}/{key}: {m}")


def _procs_with(text: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if text in (p / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_kill_9_of_the_run_stops_its_accelerate_update(tmp_path, tiny_overrides, subprocess_env):
    """The launcher dies with its parent (PR_SET_PDEATHSIG): no orphan update races a resumed run."""
    driver = Path(__file__).resolve().parent / "resume_driver.py"
    env = dict(subprocess_env, TS_RUNS_DIR=str(tmp_path / "runs"))
    sets = [
        f"--set={o}"
        for o in tiny_overrides
        + ["iterations=1", "update.launcher=accelerate", "update.num_processes=2", "update.epochs=1000"]
    ]  # minutes, unless killed
    proc = subprocess.Popen(
        [sys.executable, str(driver), "loop", "orphan", *sets],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = str(tmp_path / "runs" / "orphan" / "policy")  # in the trainer's command line
    try:
        deadline = time.monotonic() + 300
        while len(_procs_with("thinking_seeds.train.trainer")) == 0 or not _procs_with(marker):
            assert proc.poll() is None, "the run ended before its update could be caught"
            assert time.monotonic() < deadline, "no accelerate update started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # the run only, as a user's `kill -9 <pid>` would
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _procs_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _procs_with(marker), "the accelerate update outlived the killed run"
    finally:
        for pid in [proc.pid, *_procs_with(marker)]:  # torch's workers run in their own sessions
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
