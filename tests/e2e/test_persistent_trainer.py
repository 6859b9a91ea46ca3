"""The persistent trainer of `update.launcher=accelerate` (pipeline/trainer_client.py,
train/trainer_server.py), on CPU processes (slow: each launch imports torch and transformers).

- updates from the weights it keeps in memory give the same θ_1, θ_2, bit for bit, as a fresh
  `accelerate launch` per update (which always reads θ_k from disk), with two gloo processes; the
  second update really came from memory (perf/trainer_reloaded);
- a trainer killed (kill -9) in the middle of an update is reported at once, never a hang, and the
  next update launches a fresh trainer that reloads θ_k from disk; a mistake the user can fix
  (a ValueError in the trainer) comes back as a ValueError; idle ranks outlast the collective timeout;
- the trainer is gone when the run ends;
- a run killed (kill -9) after an update in the trainer resumes bit-identically: the relaunched
  trainer reloads θ_k from disk;
- `ts train` whose trainer is killed (kill -9) says so in one line (process, signal, likely cause, log,
  rerun) with the log's last lines under it, exits 2, and the same command resumes the run.

Same weights as in process (1 and 2 processes): e2e/test_update_processes.py; a kill -9 of the
run stops its trainer: the orphan test there.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.resume import _same_state, _state, kill_and_resume
from tests.helpers.resume_driver import HOOK_DIR
from tests.helpers.tiny import MOVING, TINY_RUN_ID
from tests.helpers.update_run import update_done
from thinking_seeds.config import load_config, save_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.pipeline.policy_chain import flush_checkpoints
from thinking_seeds.pipeline.run_resources import all_resources
from thinking_seeds.pipeline.session import Session
from thinking_seeds.pipeline.stage_update import update
from thinking_seeds.pipeline.trainer_client import (
    TrainerDied,
    close_trainers,
    prelaunch_trainer,
    trainer_for,
)
from thinking_seeds.store.run_dir import RunDir

pytestmark = pytest.mark.slow


def _trainers() -> list:
    """Every persistent trainer a run holds in this process (pipeline/run_resources.py)."""
    return [res.processes["trainer"].obj for res in all_resources() if "trainer" in res.processes]


def _trained(tmp_path, tiny_overrides, launcher: str) -> RunDir:
    overrides = tiny_overrides + [
        "loss.entropy_coeff=0.01",
        "update.lr=1e-3",
        f"update.launcher={launcher}",
        "update.num_processes=2",
        "eval.every=100",
    ]
    return train(RunDir.for_run("p", tmp_path / launcher), load_config("tiny", overrides))


def test_in_memory_updates_equal_fresh_launches(tmp_path, tiny_overrides):
    fresh = _trained(tmp_path, tiny_overrides, "accelerate_per_update")
    kept = _trained(tmp_path, tiny_overrides, "accelerate")
    assert not _trainers(), "the run's trainer outlived the run"
    reloaded = [kept.read_manifest(k, "update").metrics["perf/trainer_reloaded"] for k in (0, 1)]
    assert reloaded == [1.0, 0.0], "the second update should have used the weights in memory"
    for step in (1, 2):
        assert _same_state(_state(kept, step), _state(fresh, step)), f"θ_{step} differs from a fresh launch's"
    w0, w2 = _state(kept, 0)["model.safetensors"][0], _state(kept, 2)["model.safetensors"][0]
    assert any(not torch.equal(w0[k], w2[k]) for k in w0), "the weights never moved: a vacuous check"


def _copy(run: RunDir, cfg, dst, **update) -> tuple[RunDir, object]:
    out = RunDir(dst / run.run_id)
    shutil.copytree(run.root, out.root)
    c = cfg.model_copy(deep=True)
    for key, value in update.items():
        setattr(c.update, key, value)
    save_config(c, out.config_path)  # the trainer reads the run's config.yaml
    return out, c


def test_a_killed_trainer_is_reported_then_relaunched(verified_run, tmp_path):
    run, cfg = verified_run
    slow, c = _copy(run, cfg, tmp_path / "slow", launcher="accelerate", epochs=1000)  # minutes, unless killed
    trainer = trainer_for(slow, c).ready()
    caught: list[BaseException] = []

    def stage():
        try:
            update(Session(slow, c), 0)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            caught.append(e)

    worker = threading.Thread(target=stage)
    worker.start()
    time.sleep(3.0)  # well inside the update
    assert worker.is_alive(), f"the update ended early: {caught}"
    os.kill(trainer.worker_pid, signal.SIGKILL)
    t0 = time.monotonic()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the pipeline hangs on a dead trainer"
    assert time.monotonic() - t0 < 30
    assert len(caught) == 1 and isinstance(caught[0], TrainerDied), caught
    assert f"persistent trainer (pid {trainer.worker_pid}) died in the update of iteration 0" in str(caught[0])
    assert "killed by SIGKILL" in str(caught[0])
    assert not _trainers() and trainer.proc.poll() is not None  # dropped, and nothing left running
    assert slow.read_manifest(0, "update") is None

    # The next update (the same stage again, as a resumed run would) launches a fresh trainer.
    again, c1 = _copy(run, cfg, tmp_path / "again", launcher="accelerate")
    try:
        m = update_done(Session(again, c1), 0)
    finally:
        close_trainers()
    assert m.metrics["perf/trainer_reloaded"] == 1.0
    ref, c0 = _copy(run, cfg, tmp_path / "ref", launcher="in_process")
    update_done(Session(ref, c0), 0)
    got, want = (load_file(str(r.policy(1) / "model.safetensors")) for r in (again, ref))
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-5)


def test_a_trainer_killed_in_its_checkpoint_write_is_its_death_not_a_missing_checkpoint(
    verified_run, tmp_path, monkeypatch
):
    """The trainer answers update k, then writes θ_{k+1}'s checkpoint in the background. Killed in that
    write and found dead before the next stage waits for the checkpoint (what the Prefect flow's
    timing gave, 1 full slow-suite run in 1), the wait says the trainer died (signal, log), not
    "checkpoint θ_1 does not exist" from the snapshot that reads it next."""
    run, cfg = verified_run
    w, c = _copy(run, cfg, tmp_path / "write", launcher="accelerate")
    c.iterations, c.checkpoint.every = max(c.iterations, 3), 1  # θ_1 due, written in the background
    save_config(c, w.config_path)
    marker = tmp_path / "paused"
    monkeypatch.setenv("TS_TEST_PAUSE_AT", f"rename|{w.policy(1)}|{marker}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(HOOK_DIR), os.environ.get("PYTHONPATH")) if p))
    try:
        trainer = trainer_for(w, c)
        m = update(Session(w, c), 0)  # answered with θ_1 in memory; its checkpoint still being written
        assert m.outputs["policy"] and not m.hashes.get("policy")
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline, "the trainer never reached θ_1's rename"
            time.sleep(0.05)
        os.kill(int(marker.read_text().split()[0]), signal.SIGKILL)
        trainer.proc.wait(timeout=30)  # found dead before the flush: the race's losing order, made certain
        with pytest.raises(TrainerDied) as caught:
            flush_checkpoints(w, c)
        line = str(caught.value).splitlines()[0]
        assert f"persistent trainer (pid {trainer.worker_pid}) died in the checkpoint write" in line, line
        assert "killed by SIGKILL" in line and "rerun the same command to resume" in line, line
        assert not _trainers() and not w.policy(1).exists()
    finally:
        close_trainers()


@pytest.fixture(scope="module")
def persistent_run(tmp_path_factory, tiny_overrides) -> SimpleNamespace:
    """The tiny run (MOVING) trained with the persistent trainer, uninterrupted: the reference."""
    overrides = tiny_overrides + MOVING + ["update.launcher=accelerate"]
    cfg = load_config("tiny", overrides)
    run = train(RunDir.for_run(TINY_RUN_ID, tmp_path_factory.mktemp("persistent-reference")), cfg)
    return SimpleNamespace(run=run, cfg=cfg, overrides=overrides)


@pytest.mark.parametrize(
    "mode, pause",
    [
        pytest.param("loop", "seeds:1", id="loop-kill-in-seeds"),  # the relaunched trainer reloads θ_1
        pytest.param("loop", "update:0", id="loop-kill-in-update"),  # blocked in the trainer, at θ_1's rename
        pytest.param("flow", "update:0", id="prefect-kill-in-update"),
    ],
)
def test_kill_9_then_resume(mode, pause, persistent_run, runs_dir, subprocess_env, tmp_path):
    """A run with the persistent trainer killed (kill -9 of its process group) in the seeds stage
    of iteration 1 (after an update done in the trainer), or in the trainer in the middle of
    writing θ_1 (plain loop, and under Prefect), resumes with a fresh trainer that reloads θ_k from
    disk, and ends with the results of an uninterrupted run (tests/helpers/resume.py)."""
    kill_and_resume(mode, pause, persistent_run, runs_dir, subprocess_env, tmp_path)
    k = int(pause.split(":")[1])
    resumed = RunDir.for_run(TINY_RUN_ID, runs_dir)
    assert resumed.read_manifest(1, "update").metrics["perf/trainer_reloaded"] == float(k == 1)


def test_idle_ranks_outlast_the_collective_timeout(verified_run, tmp_path, monkeypatch):
    """Two processes idle between updates for longer than the collective timeout: rank 0's idle
    beats keep rank 1 out of a timed-out broadcast, and the next update runs (without the beats
    rank 1 would raise after 4 s and the trainer would be gone)."""
    monkeypatch.setenv("TS_TRAINER_COLLECTIVE_TIMEOUT_S", "4")
    monkeypatch.setenv("TS_TRAINER_IDLE_BEAT_S", "0.5")
    run, cfg = verified_run
    idle, c = _copy(run, cfg, tmp_path / "idle", launcher="accelerate", num_processes=2)
    try:
        trainer = trainer_for(idle, c).ready()
        time.sleep(10.0)
        assert trainer.proc.poll() is None, trainer.log_text()[-3000:]
        m = update(Session(idle, c), 0)
    finally:
        close_trainers()
    assert m.metrics["perf/num_processes"] == 2.0


def test_a_mistake_in_the_trainer_is_one_value_error(verified_run, tmp_path):
    """A ValueError in the trainer (rollouts without advantages) comes back as a ValueError (the CLI's
    one line, exit 2), not a traceback, and the trainer, which exits after a failed job, is dropped."""
    import pyarrow as pa

    from thinking_seeds.store.parquet_io import read_table, write_table_atomic
    from thinking_seeds.store.schemas import ROLLOUT_SCHEMA

    run, cfg = verified_run
    bad, c = _copy(run, cfg, tmp_path / "bad", launcher="accelerate")
    t = read_table(bad.rollouts(0), ROLLOUT_SCHEMA)
    i = t.schema.get_field_index("advantage")
    t = t.set_column(i, "advantage", pa.nulls(t.num_rows, t.schema.field("advantage").type))
    write_table_atomic(t, bad.rollouts(0), schema=ROLLOUT_SCHEMA)
    try:
        with pytest.raises(ValueError, match="persistent trainer: ValueError: .*run the verify stage first"):
            update(Session(bad, c), 0)
        assert not _trainers()
    finally:
        close_trainers()


def test_a_trainer_that_never_got_a_job_stops_at_once(verified_run, tmp_path):
    """A run that ends before its first update (an error in θ_0's evaluation, Ctrl-C) closes a
    prelaunched trainer that cannot read a stop: terminated at once, not after STOP_TIMEOUT_S."""
    run, cfg = verified_run
    early, c = _copy(run, cfg, tmp_path / "early", launcher="accelerate")
    for wait in (0.2, 8.0):  # still importing; connected (its hello unread) and waiting for a job
        prelaunch_trainer(early, c)
        (trainer,) = _trainers()
        time.sleep(wait)
        t0 = time.monotonic()
        close_trainers()
        assert time.monotonic() - t0 < 5.0
        assert trainer.proc.poll() is not None and not _trainers()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("orchestration", [["--no-prefect"], []], ids=["loop", "prefect"])
def test_ts_train_says_a_killed_trainer_in_one_line_then_resumes(
    orchestration, tiny_overrides, subprocess_env, tmp_path
):
    """kill -9 of the persistent trainer in the middle of an update (what the OOM killer does): `ts train`
    ends with one error line (the process, its signal, the likely cause, the log, the rerun) and the log's
    last lines under it, exit 2, no traceback; the same command again resumes the run to its end."""
    runs = tmp_path / "runs"
    marker = tmp_path / "paused"
    env = dict(subprocess_env, TS_RUNS_DIR=str(runs))
    paused = dict(
        env,
        PYTHONPATH=os.pathsep.join(p for p in (str(HOOK_DIR), env.get("PYTHONPATH")) if p),
        # the trainer blocks at the rename that publishes θ_1 (pause_hook/sitecustomize.py)
        TS_TEST_PAUSE_AT=f"rename|{RunDir.for_run('killed', runs).policy(1)}|{marker}",
    )
    sets = [f"--set={o}" for o in tiny_overrides + MOVING + ["update.launcher=accelerate"]]
    # Under Prefect the paused checkpoint write runs behind the next stages; the snapshot's wait for it
    # must say the trainer died even when the death was noticed first (it once said "checkpoint θ_1 does
    # not exist": test_a_trainer_killed_in_its_checkpoint_write_is_its_death_not_a_missing_checkpoint)
    cmd = [sys.executable, "-m", "thinking_seeds.flows.cli", "train", "--run-id", "killed", *orchestration, *sets]
    proc = subprocess.Popen(cmd, env=paused, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the update never reached θ_1's rename"
            time.sleep(0.1)
        trainer_pid = int(marker.read_text().split()[0])
        assert trainer_pid != proc.pid  # the trainer's process, not the pipeline's
        os.kill(trainer_pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, (out, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error:")]
    assert len(errors) == 1, err
    head, tail = lines[errors[0]], lines[errors[0] + 1 :]
    pattern = (
        rf"^error: persistent trainer \(pid {trainer_pid}\) died in the (update of iteration 0|checkpoint write): "
        r"killed by SIGKILL \(out of host or GPU memory\? .*`ts plan`"
    )
    assert re.search(pattern, head), head
    assert "rerun the same command to resume" in head
    kept = RunDir.for_run("killed", runs).root / "trainer.log"
    assert f"full log: {kept}" in head and kept.is_file()
    logged = [line.strip() for line in kept.read_text().splitlines() if line.strip()][-5:]
    assert [line.strip() for line in tail] == logged and all(line.startswith("  ") for line in tail), err
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    run = RunDir.for_run("killed", runs)
    assert all(run.read_manifest(k, "update") is not None for k in (0, 1))
