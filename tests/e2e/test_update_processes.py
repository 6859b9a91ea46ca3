"""The update stage under `accelerate launch` on CPU processes (slow: each launch starts Python
processes that import torch and transformers, ~10 s):

- the same θ_1 and statistics in process, under `accelerate launch` with one process, and with two
  CPU processes (`--multi_gpu --num_processes 2` + `Accelerator(cpu=True)` = gloo DDP, docs/algorithm.md §7),
  both in the run's persistent trainer (`update.launcher=accelerate`) and launched per update;
- bf16 mixed precision under `accelerate launch ... --cpu`: the exact π_old recompute in the worker;
- a kill -9 of the run stops its persistent trainer in the middle of an update (PR_SET_PDEATHSIG):
  no orphan races a resumed run.

The persistent trainer's own checks (memory vs disk, a killed trainer): e2e/test_persistent_trainer.py.

The launch command: integration/test_update_launchers.py; bf16 in process: e2e/test_device_cpu.py.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import RESUME_DRIVER
from tests.helpers.procs import procs_with
from tests.helpers.update_run import DEVICE_UPDATE, update_copy, update_done, verified_session
from thinking_seeds.pipeline.session import Session
from thinking_seeds.pipeline.trainer_client import close_trainers

pytestmark = pytest.mark.slow


def test_one_and_two_processes_match_in_process(verified_run, tmp_path):
    """Same θ_1, and the same statistics: with two processes every logged mean is over both
    processes' tokens and every maximum is the larger one (algo/stats.py), as in one process."""
    run, cfg = verified_run
    theta0 = load_file(str(run.policy(0) / "model.safetensors"))
    ref, ref_metrics = update_copy(run, cfg, tmp_path, "in_process", "in_process", 1)
    assert any(not torch.equal(theta0[n], ref[n]) for n in ref), "the update did not move the weights"
    assert "actor/ratio_max/prefix" in ref_metrics and "actor/prefix_abs_log_ratio/age=0" in ref_metrics
    launches = [(f"{launcher}{n}", launcher, n) for launcher in ("accelerate", "accelerate_per_update") for n in (1, 2)]
    for name, launcher, n in launches:
        got, metrics = update_copy(run, cfg, tmp_path, name, launcher, n)
        stats = {k for k in ref_metrics if k.startswith("actor/")}
        assert stats <= metrics.keys(), stats - metrics.keys()
        for key in sorted(stats):
            assert metrics[key] == pytest.approx(ref_metrics[key], rel=1e-4, abs=1e-6), f"{name}: {key}"
        assert got.keys() == ref.keys()
        worst = max(float((got[key] - ref[key]).abs().max()) for key in ref)
        print(f"{name}: max |Δθ| vs in_process = {worst:.3g}")
        if n == 1:  # one process: the same computation, bit for bit (config_hash leaves the launcher out)
            assert worst == 0.0, f"{name}: one process differs from in_process by {worst:.3g}"
            continue
        for key in ref:
            # Float summation order differs (gloo all-reduce, sharded micro-batches): tolerance, not equality.
            torch.testing.assert_close(
                got[key], ref[key], rtol=1e-4, atol=1e-5, msg=lambda m, name=name, key=key: f"{name}/{key}: {m}"
            )


@pytest.mark.parametrize("launcher", ["accelerate", "accelerate_per_update"])
def test_bf16_under_accelerate_launch_on_cpu(tmp_path, tiny_overrides, launcher):
    """`accelerate launch --mixed_precision bf16 ... --cpu`: the same exact recompute, in the worker
    (the persistent trainer's, and a per-update launch's)."""
    run, cfg, s = verified_session(
        tmp_path,
        tiny_overrides
        + DEVICE_UPDATE
        + ["device=cpu", "update.mixed_precision=bf16", f"update.launcher={launcher}", "update.mini_batches=1"],
    )
    s.close()
    try:
        m = update_done(Session(run, cfg), 0)
    finally:
        close_trainers()
    assert all(math.isfinite(v) for v in m.metrics.values()), m.metrics
    assert m.metrics["actor/engine_logprob_diff/max"] > 0
    assert abs(m.metrics["actor/ratio_mean/on_policy"] - 1.0) <= 1e-6  # one step: unchanged weights throughout
    assert {t.dtype for t in load_file(str(run.policy(1) / "model.safetensors")).values()} == {torch.float32}


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_kill_9_of_the_run_stops_its_accelerate_update(tmp_path, tiny_overrides, subprocess_env):
    """The launcher dies with its parent (PR_SET_PDEATHSIG): no orphan update races a resumed run."""
    driver = RESUME_DRIVER
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
        while len(procs_with("thinking_seeds.train.trainer")) == 0 or not procs_with(marker):
            assert proc.poll() is None, "the run ended before its update could be caught"
            assert time.monotonic() < deadline, "no accelerate update started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # the run only, as a user's `kill -9 <pid>` would
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while procs_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not procs_with(marker), "the accelerate update outlived the killed run"
    finally:
        for pid in [proc.pid, *procs_with(marker)]:  # torch's workers run in their own sessions
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
