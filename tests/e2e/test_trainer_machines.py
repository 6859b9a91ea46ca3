"""A trainer group across machines (`update.num_machines`, issue #14 item 4), on one machine (slow: two
runs with `accelerate launch`ed trainers, ~3 minutes on 2 loaded cores).

Two "machines" on 127.0.0.1: the driver runs the documented `ts train ... --set update.num_machines=2
--set update.main_process_ip=HEAD` (a Prefect flow; its persistent trainer is machine rank 0) and a second
process runs the documented `ts trainer-node --run-id big --machine-rank 1` (docs/scaling.md, "The trainer
group"). One process per machine, gloo. The weights must be those of one machine with two processes
(the same world of 2, whose weights equal the in-process update's: e2e/test_update_processes.py).
A kill -9 of the driver takes the other machine's ranks down too: `ts trainer-node` exits non-zero.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.procs import procs_with
from tests.helpers.ray_cluster import free_port
from tests.helpers.tiny import MOVING
from tests.helpers.trainer_group import HEAD, RUN_ID, driver_sets, node_args
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

pytestmark = pytest.mark.slow

TS = str(Path(sys.executable).parent / "ts")


def node_command(rank: int) -> list[str]:
    return [TS, *node_args(rank)]


def test_two_machines_train_the_two_process_weights(tmp_path, tiny_overrides, subprocess_env):
    overrides = tiny_overrides + MOVING  # 2 iterations: the group serves two updates, θ_2 from memory
    ref = train(
        RunDir.for_run(RUN_ID, tmp_path / "one-machine"),
        load_config("tiny", overrides + ["update.launcher=accelerate", "update.num_processes=2"]),
    )

    runs = tmp_path / "runs"  # "the shared filesystem": both machines' TS_RUNS_DIR
    env = {**subprocess_env, "TS_RUNS_DIR": str(runs)}
    log = tmp_path / "node.log"
    with log.open("wb") as out:  # the node first: it waits for the run's config.yaml
        node = subprocess.Popen(node_command(1), env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        sets = overrides + driver_sets(HEAD, free_port())  # a free port: tests on one machine must not collide
        cmd = [TS, "train", "--preset", "tiny", "--run-id", RUN_ID, *[f"--set={o}" for o in sets]]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, (p.stdout + p.stderr)[-4000:] + "\nnode:\n" + log.read_text()[-3000:]
        assert node.wait(timeout=120) == 0, log.read_text()[-3000:]  # the group stopped with the run
    finally:
        if node.poll() is None:
            node.terminate()
            node.wait(timeout=60)
    said = log.read_text()
    assert "--num_machines 2 " in said and "--machine_rank 1 " in said and f"--main_process_ip {HEAD} " in said

    run = RunDir.for_run(RUN_ID, runs)
    for k in (0, 1):
        m = read_table(run.metrics(k, "update")).to_pydict()
        assert dict(zip(m["name"], m["value"], strict=True))["perf/num_processes"] == 2.0  # one world, 2 machines
    assert read_table(run.rollouts(0)).equals(read_table(ref.rollouts(0)))  # the same data reached the trainer
    theta0 = load_file(str(ref.policy(0) / "model.safetensors"))
    for step in (1, 2):
        got = load_file(str(run.policy(step) / "model.safetensors"))
        want = load_file(str(ref.policy(step) / "model.safetensors"))
        assert got.keys() == want.keys()
        worst = max(float((got[n] - want[n]).abs().max()) for n in want)
        print(f"θ_{step}: max |Δ| two machines vs one machine, two processes = {worst:.3g}")
        for n in want:
            torch.testing.assert_close(
                got[n], want[n], rtol=1e-4, atol=1e-5, msg=lambda m, n=n, step=step: f"θ_{step}/{n}: {m}"
            )
    assert any(not torch.equal(theta0[n], want[n]) for n in want), "the weights never moved: a vacuous check"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_a_killed_driver_takes_the_other_machines_ranks_down(tmp_path, tiny_overrides, subprocess_env):
    """kill -9 of the driver while its trainer group waits for the next job: the driver's machine loses its
    ranks (PR_SET_PDEATHSIG), the other machine's rank sees its peer gone and `ts trainer-node` exits 1,
    leaving no process behind (a resumed run launches a fresh group, which the nodes join again)."""
    runs = tmp_path / "runs"
    env = {**subprocess_env, "TS_RUNS_DIR": str(runs)}
    log = tmp_path / "node.log"
    with log.open("wb") as out:
        node = subprocess.Popen(node_command(1), env=env, stdout=out, stderr=subprocess.STDOUT)
    sets = tiny_overrides + ["iterations=3"] + driver_sets(HEAD, free_port())
    cmd = [TS, "train", "--no-prefect", "--preset", "tiny", "--run-id", RUN_ID, *[f"--set={o}" for o in sets]]
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = str(runs / RUN_ID / "policy")  # in every trainer process's command line
    try:
        deadline = time.monotonic() + 300
        while not (runs / RUN_ID / "policy" / "step_000001" / "manifest.json").exists():  # the group trained once
            assert driver.poll() is None and node.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the trainer group never wrote θ_1"
            time.sleep(0.2)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        assert node.wait(timeout=120) != 0, log.read_text()[-3000:]  # seconds here; a collective timeout at worst
        deadline = time.monotonic() + 30
        while procs_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not procs_with(marker), "a trainer process outlived the killed driver"
    finally:
        for p in (driver, node):
            if p.poll() is None:
                p.kill()
        for pid in procs_with(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
