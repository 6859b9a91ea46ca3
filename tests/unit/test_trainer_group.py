"""A trainer group across machines (update.num_machines): its config, the accelerate options of each
machine's launch, and `ts trainer-node`'s mistakes (one line, exit 2). The group itself, two
"machines" on one host: e2e/test_trainer_machines.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers import REPO
from tests.helpers.trainer_group import DOC_PORT, RUN_ID, driver_sets, node_args
from thinking_seeds.assets import ACCELERATE_NEUTRAL_CONFIG
from thinking_seeds.config import ConfigError, load_config, save_config
from thinking_seeds.flows.cli import app
from thinking_seeds.pipeline.trainer_client import node_command, trainer_command
from thinking_seeds.pipeline.update_launcher import launch_prefix
from thinking_seeds.store.run_dir import RunDir

GROUP = ["update.launcher=accelerate", "update.num_machines=2", "update.main_process_ip=10.0.0.1"]


def _opt(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_each_machine_launches_the_same_group_with_its_rank():
    cfg = load_config("tiny", GROUP + ["update.num_processes=2", "update.main_process_port=29555", "device=cpu"])
    for rank in (0, 1):
        cmd, cpu = launch_prefix(cfg, rank)
        assert cpu and "--multi_gpu" in cmd
        assert _opt(cmd, "--num_processes") == "4"  # accelerate counts the whole group: 2 per machine x 2
        assert _opt(cmd, "--num_machines") == "2" and _opt(cmd, "--machine_rank") == str(rank)
        assert (_opt(cmd, "--main_process_ip"), _opt(cmd, "--main_process_port")) == ("10.0.0.1", "29555")


def test_one_process_per_machine_is_still_a_ddp_group():
    cmd, _ = launch_prefix(load_config("tiny", GROUP + ["device=cpu"]), 1)
    assert _opt(cmd, "--num_processes") == "2" and "--multi_gpu" in cmd  # gloo DDP over the two machines


def test_one_machine_launches_as_before():
    cmd, _ = launch_prefix(load_config("tiny", ["update.num_processes=2", "device=cpu"]))
    assert _opt(cmd, "--num_machines") == "1" and _opt(cmd, "--num_processes") == "2" and "--multi_gpu" in cmd
    assert "--machine_rank" not in cmd and "--main_process_ip" not in cmd
    assert int(_opt(cmd, "--main_process_port")) != 29500  # a free port per launch
    cmd, _ = launch_prefix(load_config("tiny", ["device=cpu"]))
    assert _opt(cmd, "--num_processes") == "1" and "--multi_gpu" not in cmd and "--main_process_port" not in cmd


def test_driver_holds_the_socket_and_the_nodes_do_not(tmp_path):
    run = RunDir.for_run("big", tmp_path)
    cfg = load_config("tiny", GROUP + ["device=cpu"])
    driver = trainer_command(run, cfg, tmp_path / "sock")
    assert _opt(driver, "--machine_rank") == "0" and _opt(driver, "--socket") == str(tmp_path / "sock")
    node = node_command(run, cfg, 1)
    assert _opt(node, "--machine_rank") == "1" and "--socket" not in node
    assert _opt(node, "--out-root") == str(run.policy_root) and "--cpu" in node
    assert driver[: driver.index("--machine_rank")] == node[: node.index("--machine_rank")]  # the same group


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (
            ["update.num_machines=2", "update.launcher=in_process", "update.main_process_ip=h"],
            "needs update.launcher=accelerate",
        ),
        (
            ["update.num_machines=2", "update.launcher=accelerate_per_update", "update.main_process_ip=h"],
            "needs update.launcher=accelerate",
        ),
        (["update.num_machines=2", "update.launcher=accelerate"], "needs update.main_process_ip"),
    ],
)
def test_a_group_needs_the_persistent_trainer_and_an_address(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config("tiny", overrides)


def test_where_the_group_meets_is_not_hashed_but_its_size_is():
    base = load_config("tiny").config_hash()
    group = load_config("tiny", GROUP).config_hash()
    moved = load_config("tiny", GROUP + ["update.main_process_ip=10.0.0.2", "update.main_process_port=1234"])
    assert moved.config_hash() == group  # another address: the same computation
    assert group != base  # size: hashed
    assert load_config("tiny", ["update.launcher=in_process"]).config_hash() == base  # one process: no launcher
    assert load_config("tiny", ["update.num_machines=1"]).config_hash() == base  # old runs keep their hash


def _ts(runs, *args):
    return CliRunner().invoke(app, ["trainer-node", *args], env={"TS_RUNS_DIR": str(runs), "COLUMNS": "250"})


def _one_line_error(r, needle: str) -> None:
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.output


def test_trainer_node_mistakes_are_one_line(tmp_path):
    _one_line_error(_ts(tmp_path, "--run-id", "none", "--machine-rank", "1", "--wait", "0"), "start the run")
    one = RunDir.for_run("one", tmp_path)
    one.root.mkdir()
    save_config(load_config("tiny", ["update.launcher=accelerate"]), one.config_path)
    _one_line_error(_ts(tmp_path, "--run-id", "one", "--machine-rank", "1"), "trains on one machine")
    two = RunDir.for_run("two", tmp_path)
    two.root.mkdir()
    save_config(load_config("tiny", GROUP), two.config_path)
    for rank in ("0", "2"):
        _one_line_error(_ts(tmp_path, "--run-id", "two", "--machine-rank", rank), "has machine ranks 1 .. 1")


def test_the_docs_show_the_commands_the_e2e_test_runs():
    """docs/scaling.md's trainer-group commands are e2e/test_trainer_machines.py's, with HEAD for 127.0.0.1."""
    doc = re.sub(r"\\\n\s*", "", (REPO / "docs" / "scaling.md").read_text())  # join continued lines
    driver = " ".join(
        ["ts train --preset tiny --run-id", RUN_ID, *[f"--set {o}" for o in driver_sets("HEAD", DOC_PORT)]]
    )
    assert driver in doc
    assert "ts " + " ".join(node_args(1)) in doc
    # and the launch `ts trainer-node` prints on a CPU machine (docs: "on a CPU machine ... it is")
    cfg = load_config("tiny", driver_sets("HEAD", DOC_PORT) + ["device=cpu"])
    cmd = node_command(RunDir.for_run(RUN_ID, Path("/shared/runs")), cfg, 1)
    assert cmd[0] == sys.executable
    shown = " ".join(["python", *cmd[1:]])
    assert shown.replace(str(ACCELERATE_NEUTRAL_CONFIG), "SITE/thinking_seeds/assets/accelerate_neutral.yaml") in doc
