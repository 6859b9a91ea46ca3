"""The deployments of prefect.yaml, end to end on loopback, with the commands of docs/deployments.md:

    prefect server start --host 127.0.0.1 --port PORT          (own PREFECT_HOME)
    prefect work-pool create ts-process --type process
    prefect --no-prompt deploy --all
    prefect worker start --pool ts-process
    prefect deployment run train/train --param run_id=... --param overrides=[...] --watch

and the training run completes in the worker, writing the run directory. The nightly evaluation
and the corpus report are checked for their schedules.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import REPO
from thinking_seeds.store.run_dir import RunDir

PREFECT = str(Path(sys.executable).parent / "prefect")
pytestmark = pytest.mark.slow  # a Prefect server, a process worker and a training run: ~55 s

PLACEHOLDER_REPORT = """
from prefect import flow


@flow(name="report")
def report_flow(run_id: str) -> str:  # placeholder for the test only (flows/report.py is missing)
    return run_id
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _project_dir(tmp_path: Path) -> Path:
    """The repository root; a copy with a placeholder report flow if flows/report.py lacks one."""
    report = REPO / "flows" / "report.py"
    if report.exists() and "def report_flow" in report.read_text():
        return REPO
    dst = tmp_path / "project"
    for name in ("flows", "tasks", "ts_core", "data"):
        shutil.copytree(REPO / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "prefect.yaml", dst / "prefect.yaml")
    (dst / "flows" / "report.py").write_text(PLACEHOLDER_REPORT)
    return dst


def _stop(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def test_deploy_and_run_training_on_a_process_worker(tmp_path, tiny_overrides):
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = dict(
        os.environ,
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_API_URL=api,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        TS_RUNS_DIR=str(tmp_path / "runs"),
        OMP_NUM_THREADS="1",
    )
    cwd = _project_dir(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()

    def run(*args: str, timeout: float = 300) -> str:
        p = subprocess.run([PREFECT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, (
            f"prefect {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )
        return p.stdout

    def start(name: str, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [PREFECT, *args],
            cwd=cwd,
            env=env,
            stdout=(logs / f"{name}.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    server = start("server", "server", "start", "--host", "127.0.0.1", "--port", str(port))
    worker = None
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{api}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, (logs / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (
                "prefect server did not come up:\n" + (logs / "server.log").read_text()[-3000:]
            )
            time.sleep(0.5)

        run("work-pool", "create", "ts-process", "--type", "process")
        out = run("--no-prompt", "deploy", "--all")
        for name in ("train/train", "evaluate/nightly", "report/corpus-report"):
            assert f"Deployment '{name}' successfully created" in out, out

        nightly = json.loads(run("deployment", "inspect", "evaluate/nightly", "--output", "json"))
        assert [s["schedule"]["cron"] for s in nightly["schedules"]] == ["0 3 * * *"]
        report = json.loads(run("deployment", "inspect", "report/corpus-report", "--output", "json"))
        assert [s["schedule"]["interval"] for s in report["schedules"]] == [21600.0]
        assert report["work_pool_name"] == nightly["work_pool_name"] == "ts-process"

        worker = start("worker", "worker", "start", "--pool", "ts-process")
        out = run(
            "deployment",
            "run",
            "train/train",
            "--param",
            "run_id=deployed",
            "--param",
            "overrides=" + json.dumps(tiny_overrides),
            "--watch",
            "--watch-timeout",
            "500",
            timeout=560,
        )
        assert "Completed" in out, out[-3000:] + (logs / "worker.log").read_text()[-3000:]
    finally:
        if worker is not None:
            _stop(worker, signal.SIGINT)
        _stop(server, signal.SIGTERM)

    run_dir = RunDir(tmp_path / "runs" / "deployed")
    assert run_dir.read_manifest(1, "evaluate") is not None, (logs / "worker.log").read_text()[-3000:]
    assert (run_dir.policy(2) / "manifest.json").is_file()
    assert not (run_dir.root / ".prefect-results").exists()  # resume reads the manifests only
