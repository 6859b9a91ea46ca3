"""The smaller ways a user's mistake used to end in a traceback, a half-made run or a damaged one: each
is now one line and exit 2, with nothing written -- --runs-dir naming a file, a run id starting with
'-', `ts export --out` naming a file, a link or a folder inside a run, a second `ts train` on a busy
run, cluster=ray without Ray or without an address."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from tests.helpers.tiny import copy_run
from thinking_seeds.flows.cli import app


def _one_line(args: list[str], expected: str) -> None:
    res = CliRunner().invoke(app, args)
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, res.output)
    assert expected in " ".join(res.output.split()), (args, res.output)


def test_runs_dir_naming_a_file_and_run_ids_starting_with_a_dash(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    for args in (["runs"], ["check", "r"], ["sql", "SELECT 1"], ["eval", "r"]):
        _one_line([*args, "--runs-dir", str(f)], "is a file, not a folder")
    _one_line(["check", "--runs-dir", str(tmp_path), "--", "-r"], "must not start with '-'")
    _one_line(["train", "--run-id=-r", "--no-prefect", "--runs-dir", str(tmp_path)], "must not start with '-'")
    assert not (tmp_path / "-r").exists()


def test_export_refuses_a_file_a_link_and_a_folder_inside_a_run(tiny_run, tmp_path):
    runs = tmp_path / "runs"
    run = copy_run(tiny_run.run, runs)
    d = ["--runs-dir", str(runs)]
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    _one_line(["export", "tiny", "--out", str(tmp_path / "file"), *d], "is a file")
    _one_line(["export", "tiny", "--out", str(tmp_path / "file" / "sub"), *d], "is a file, not a folder")
    _one_line(["export", "tiny", "--out", str(tmp_path / "link"), *d], "is a link")
    before = sorted(p.name for p in run.policy_root.iterdir())
    _one_line(["export", "tiny", "--out", str(run.policy(9)), *d], "is inside run directory")
    assert sorted(p.name for p in run.policy_root.iterdir()) == before and not (tmp_path / "elsewhere").exists()
    res = CliRunner().invoke(app, ["export", "tiny", "--out", str(tmp_path / "exported"), *d])
    assert res.exit_code == 0 and (tmp_path / "exported" / "model.safetensors").is_file(), res.output


def test_a_second_train_on_a_busy_run_is_its_one_line(tmp_path, subprocess_env, tiny_overrides):
    root = tmp_path / "busy"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from thinking_seeds.store import run_lock; "
            "run_lock.acquire(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)",
            str(root),
        ],
        env=subprocess_env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        sets = [x for o in tiny_overrides for x in ("--set", o)]
        t = time.perf_counter()
        _one_line(
            ["train", "--run-id", "busy", "--runs-dir", str(tmp_path), *sets], f"is in use by live process {holder.pid}"
        )
        assert time.perf_counter() - t < 20  # no Prefect server was started for it
    finally:
        holder.kill()
        holder.wait()


def test_cluster_ray_without_ray_or_address_writes_nothing(tmp_path, tiny_overrides, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    sets = [x for o in [*tiny_overrides, "cluster.kind=ray"] for x in ("--set", o)]
    args = ["train", "--run-id", "r", "--no-prefect", "--runs-dir", str(tmp_path), *sets]
    _one_line(args, "cluster=ray needs the cluster's address")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    _one_line(args, "cluster=ray needs Ray, which is not installed here")
    assert os.listdir(tmp_path) == []


@pytest.fixture(autouse=True)
def _no_runs_dir_env(monkeypatch):
    monkeypatch.delenv("TS_RUNS_DIR", raising=False)
