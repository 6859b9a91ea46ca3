"""A trainer group of one process starts without `accelerate launch`'s interpreter in between (~230 MB
and a process less): the command and environment accelerate's own simple launcher would give its one
child. A group of several, or a launch an accelerate config file shapes, keeps the launcher."""

from __future__ import annotations

import os
from pathlib import Path

from thinking_seeds.config import load_config
from thinking_seeds.pipeline.trainer_client import trainer_command
from thinking_seeds.pipeline.update_launcher import LAUNCH_MODULE, accelerate_command, without_launcher
from thinking_seeds.store.run_dir import RunDir


def test_one_process_runs_the_trainer_module_itself_with_the_launchers_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no user accelerate config file is read here
    run = RunDir.for_run("r", tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = trainer_command(run, load_config("tiny", ["device=cpu"]), Path("/tmp/sock"))
    assert cmd[1:3] == ["-m", LAUNCH_MODULE]
    direct, child_env = without_launcher(cmd, env)
    tail = cmd[cmd.index("thinking_seeds.train.trainer_server") - 1 :]
    assert direct == [cmd[0], *tail]  # python -m thinking_seeds.train.trainer_server --socket ... --cpu
    assert child_env["ACCELERATE_MIXED_PRECISION"] == "no" and child_env["ACCELERATE_DYNAMO_BACKEND"] == "NO"
    assert child_env["OMP_NUM_THREADS"] == "1"
    assert all(child_env[k] == v for k, v in env.items() if not k.startswith(("ACCELERATE_", "KMP_")))
    per_update = accelerate_command(run, load_config("tiny", ["device=cpu"]), 0, tmp_path / "m.json", None)
    assert without_launcher(per_update, env)[0][1:3] == ["-m", "thinking_seeds.train.trainer"]


def test_a_group_keeps_the_launcher(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    run = RunDir.for_run("r", tmp_path)
    env = dict(os.environ)
    cmd = trainer_command(run, load_config("tiny", ["device=cpu", "update.num_processes=2"]), Path("/tmp/sock"))
    assert without_launcher(cmd, env) == (cmd, env)
    assert without_launcher(["python", "-m", "x"], env) == (["python", "-m", "x"], env)
