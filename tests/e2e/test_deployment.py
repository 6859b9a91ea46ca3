"""The deployments of prefect.yaml, end to end on loopback, with the commands of docs/deployments.md:

    prefect server start --host 127.0.0.1 --port PORT          (own PREFECT_HOME)
    prefect work-pool create ts-process --type process
    prefect --no-prompt deploy --all
    prefect worker start --pool ts-process
    prefect deployment run train/train --param run_id=... --param overrides=[...] --watch

and the training run completes in the worker, writing the run directory. The nightly evaluation
and the corpus report are checked for their schedules (inactive until pointed at a run), and one of them,
pointed at a run with the command docs/deployments.md gives, has its schedule fire: the server's
scheduler creates runs and the worker takes them to Completed (it never did with SQLAlchemy 2.1 under
Prefect <= 3.9: issue 50).
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
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

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


def api_post(api: str, path: str, body: dict) -> list | dict:
    """POST a JSON body to the Prefect API (`api` ends in /api) and return the decoded answer."""
    req = urllib.request.Request(
        f"{api}/{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class Stack(NamedTuple):
    """What `_deployed` yields: `run(*prefect args)` (asserts exit 0, returns stdout), the logs folder,
    the API's URL, the workers started so far (the current one last), `start_worker(extra_env)`,
    `restart_server()` (kill -9, start again on the same port and database; returns the seconds it was down)
    and the server processes started so far (the current one last)."""

    run: Callable[..., str]
    logs: Path
    api: str
    workers: list[subprocess.Popen]
    start_worker: Callable[[dict[str, str] | None], subprocess.Popen]
    restart_server: Callable[[], float]
    servers: list[subprocess.Popen]


@contextmanager
def _deployed(
    tmp_path: Path,
    worker_env: dict[str, str] | None = None,
    server_env: dict[str, str] | None = None,
    worker_args: tuple[str, ...] = (),
):
    """A Prefect server (its environment plus `server_env`), prefect.yaml's deployments and a process
    worker (its environment plus `worker_env`, its options plus `worker_args`); yields a Stack; stops
    the workers and the server."""
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

    def start(name: str, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            [PREFECT, *args],
            cwd=cwd,
            env={**env, **(extra_env or {})},
            stdout=(logs / f"{name}.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    servers = [start("server", "server", "start", "--host", "127.0.0.1", "--port", str(port), extra_env=server_env)]
    workers: list[subprocess.Popen] = []

    def wait_until_up() -> None:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{api}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert servers[-1].poll() is None, (logs / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (
                "prefect server did not come up:\n" + (logs / "server.log").read_text()[-3000:]
            )
            time.sleep(0.5)

    def restart_server() -> float:
        t0 = time.monotonic()
        _stop(servers[-1], signal.SIGKILL)
        servers.append(
            start("server-1", "server", "start", "--host", "127.0.0.1", "--port", str(port), extra_env=server_env)
        )
        wait_until_up()
        return time.monotonic() - t0

    def start_worker(extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        args = ("worker", "start", "--pool", "ts-process", *worker_args)
        workers.append(start(f"worker-{len(workers)}" if workers else "worker", *args, extra_env=extra_env))
        return workers[-1]

    try:
        wait_until_up()
        run("work-pool", "create", "ts-process", "--type", "process")
        out = run("--no-prompt", "deploy", "--all")
        for name in ("train/train", "evaluate/nightly", "report/corpus-report"):
            assert f"Deployment '{name}' successfully created" in out, out
        start_worker(worker_env)
        yield Stack(run, logs, api, workers, start_worker, restart_server, servers)
    finally:
        for worker in workers:
            _stop(worker, signal.SIGINT)
        _stop(servers[-1], signal.SIGTERM)


def _run_training(run, logs: Path, run_id: str, overrides: list[str]) -> None:
    out = run(
        "deployment",
        "run",
        "train/train",
        "--param",
        f"run_id={run_id}",
        "--param",
        "overrides=" + json.dumps(overrides),
        "--watch",
        "--watch-timeout",
        "800",
        timeout=860,
    )
    assert "Completed" in out, out[-3000:] + (logs / "worker.log").read_text()[-3000:]


def test_deploy_and_run_training_on_a_process_worker(tmp_path, tiny_overrides):
    with _deployed(tmp_path) as (run, logs, *_):
        nightly = json.loads(run("deployment", "inspect", "evaluate/nightly", "--output", "json"))
        assert [s["schedule"]["cron"] for s in nightly["schedules"]] == ["0 3 * * *"]
        report = json.loads(run("deployment", "inspect", "report/corpus-report", "--output", "json"))
        assert [s["schedule"]["interval"] for s in report["schedules"]] == [21600.0]
        # a fresh install has no run `demo`: the schedules wait until pointed at a run
        assert [s["active"] for s in nightly["schedules"] + report["schedules"]] == [False, False]
        assert report["work_pool_name"] == nightly["work_pool_name"] == "ts-process"
        _run_training(run, logs, "deployed", tiny_overrides)

    run_dir = RunDir(tmp_path / "runs" / "deployed")
    assert run_dir.read_manifest(1, "evaluate") is not None, (logs / "worker.log").read_text()[-3000:]
    assert (run_dir.policy(2) / "manifest.json").is_file()
    assert not (run_dir.root / ".prefect-results").exists()  # resume reads the manifests only


def test_the_train_deployment_runs_on_a_ray_cluster(tmp_path, tiny_overrides):
    """docs/scaling.md, "Scheduled deployments against a Ray cluster": the process worker has RAY_ADDRESS
    in its environment, the run's overrides the cluster keys (DEPLOYMENT_SETS, which
    unit/test_scaling_docs.py finds in the docs); a local cluster started here stands for the real one."""
    pytest.importorskip("ray")
    from tests.helpers.ray_cluster import DEPLOYMENT_RUN_ID, DEPLOYMENT_SETS, running_cluster

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    with running_cluster(env, num_cpus=2) as cluster:
        with _deployed(tmp_path, {"RAY_ADDRESS": cluster.address}) as (run, logs, *_):
            # the docs' keys, then the tiny run's and half a CPU per actor (4 actors on the 2-CPU head)
            _run_training(run, logs, DEPLOYMENT_RUN_ID, DEPLOYMENT_SETS + tiny_overrides + ["cluster.worker_cpus=0.5"])

    run_dir = RunDir(tmp_path / "runs" / DEPLOYMENT_RUN_ID)
    assert (run_dir.policy(2) / "manifest.json").is_file(), (logs / "worker.log").read_text()[-3000:]
    for k in (0, 1):
        m = run_dir.read_manifest(k, "continuation")
        assert m.seconds.get("workers_generation", 0) > 0  # generated on the Ray workers, not in the flow
        assert run_dir.read_manifest(k, "verify") is not None


def _wait_for(what: str, until: Callable[[], bool], timeout: float, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, (
            f"{what}: not within {timeout:.0f} s\nserver log:\n{(logs / 'server.log').read_text()[-3000:]}"
            f"\nworker log:\n{(logs / 'worker.log').read_text()[-3000:]}"
        )
        time.sleep(1)


def test_an_interval_schedule_fires_and_the_worker_completes_its_runs(tmp_path, tiny_run):
    """The corpus report, pointed at a finished run with docs/deployments.md's command and an interval of
    5 s: the server's scheduler creates its runs (its loop every 2 s here instead of 60) and the worker,
    one run at a time, takes two of them to Completed, each writing the run's report."""
    from tests.helpers.tiny import copy_run

    copy_run(tiny_run.run, tmp_path / "runs")
    fast_scheduler = {"PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2"}
    fast_worker = {"PREFECT_WORKER_QUERY_SECONDS": "2"}
    with _deployed(tmp_path, fast_worker, fast_scheduler, ("--limit", "1")) as (run, logs, api, *_):
        run(
            "--no-prompt",
            "deploy",
            "--name",
            "corpus-report",
            "--param",
            f"run_id={tiny_run.run.run_id}",
            "--interval",
            "5",
        )

        def runs(state: str) -> list[dict]:
            flt = {
                "deployments": {"name": {"any_": ["corpus-report"]}},
                "flow_runs": {"state": {"type": {"any_": [state]}}},
            }
            return api_post(api, "flow_runs/filter", flt)

        _wait_for("the scheduler created the schedule's runs", lambda: len(runs("SCHEDULED")) > 0, 90, logs)
        _wait_for("the worker completed two scheduled runs", lambda: len(runs("COMPLETED")) >= 2, 240, logs)
        assert not runs("FAILED") and not runs("CRASHED"), (logs / "worker.log").read_text()[-3000:]
    assert (tmp_path / "runs" / tiny_run.run.run_id / "reports" / "report.md").is_file()
