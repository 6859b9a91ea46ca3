"""Shared test fixtures and environment.

Environment (set before torch or prefect is imported by any test module):
- one torch thread (docs/algorithm.md §7: with the other core busy, two threads run 10-40x slower);
- Prefect: no analytics, and a private PREFECT_HOME for the session so tests never touch
  ~/.prefect (each flow run in a test starts a temporary local server on that home's database).

Fixtures:
- `tiny_model_dir`: the random-weights tiny model of tests.helpers.tiny, built once per session.
- `tiny_overrides`: `--set` overrides for a run of a few seconds on that model.
- `tiny_run`: that run (plus MOVING: the weights move) trained once per session with the plain loop,
  run id `tiny`; read it, or change a copy (`tests.helpers.tiny.copy_run`), never the run itself.
- `verified_run`: a tiny run stopped before its first update (tests.helpers.update_run).
- `runs_dir`: a fresh TS_RUNS_DIR for one test.
- `subprocess_env`: os.environ for child processes (same threads, Prefect home and runs dir).

Hooks: every test under tests/e2e/ is marked `slow` (CI's second step, `make test-slow`), and the
unit tests run first. When the session runs more than tests/unit, Prefect's temporary server (a
subprocess: ~10-20 s on a fresh database, that the first flow test used to pay) starts right after
collection, while the unit tests run on one core; a flow run that comes before it is up waits for it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
# Prefect gives its temporary server 20 s to start; on a loaded 2-core machine (experiments running
# beside the suite) that is not enough and a flow test fails before it starts.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
_prefect_home = tempfile.mkdtemp(prefix="ts-test-prefect-home-")
atexit.register(shutil.rmtree, _prefect_home, ignore_errors=True)
os.environ["PREFECT_HOME"] = _prefect_home
os.environ.pop("PREFECT_API_URL", None)  # never talk to a developer's server from tests

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from tests.helpers import REPO  # noqa: E402
from tests.helpers.tiny import MOVING, TINY_OVERRIDES, TINY_RUN_ID, build_tiny_model  # noqa: E402

E2E = REPO / "tests" / "e2e"
UNIT = REPO / "tests" / "unit"  # no Prefect flow runs there
_prefect_start: threading.Thread | None = None


@pytest.hookimpl(tryfirst=True)  # before `-m 'not slow'` deselects
def pytest_collection_modifyitems(items):
    """Mark tests/e2e slow; run tests/unit first, then the rest in their order (fast failures first,
    and the unit tests overlap the start of Prefect's server)."""
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: not item.path.is_relative_to(UNIT))  # stable: modules stay together


def pytest_collection_finish(session):
    """Start Prefect's temporary server in a thread now if a selected test may run a flow (any outside
    tests/unit but the vllm ones); the unit tests run meanwhile, on one core. Whatever needs the server
    before it is up (SubprocessASGIServer.start: every flow run, client, event or log worker) waits."""
    global _prefect_start
    if session.config.option.collectonly or not any(
        not item.path.is_relative_to(UNIT) and item.get_closest_marker("vllm") is None for item in session.items
    ):
        return
    from prefect.server.api.server import SubprocessASGIServer

    start = SubprocessASGIServer.start
    template = _migrated_prefect_db(session.config)
    args = (start, SubprocessASGIServer(), template)
    thread = threading.Thread(target=_start_from_template, args=args, name="prefect-server-start", daemon=True)

    def start_when_up(self, *args, **kwargs):
        if threading.current_thread() is not thread:
            thread.join()
        return start(self, *args, **kwargs)  # a no-op once it runs; starts it again if that start failed

    SubprocessASGIServer.start = start_when_up
    _prefect_start = thread
    thread.start()


def _migrated_prefect_db(config) -> Path | None:
    """Where this Prefect version's freshly migrated database is kept between sessions (pytest's cache),
    or None without the cache plugin. A server on an empty database spends ~8 of its ~12 CPU-seconds of
    start-up migrating it, once per xdist worker; from a copy of a migrated one it starts in ~4."""
    import prefect
    from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL

    cache = getattr(config, "cache", None)
    if cache is None or not PREFECT_API_DATABASE_CONNECTION_URL.value().endswith(f"{_prefect_home}/prefect.db"):
        return None  # no cache, or a database elsewhere than the session's home (another URL set)
    return cache.mkdir("prefect-db") / f"prefect-{prefect.__version__}.db"


def _start_from_template(start, server, template: Path | None) -> None:
    """Start the server on a copy of the migrated template if there is one; else start it (migrating
    the session's empty database) and keep a consistent copy of that database, still empty, as the template."""
    import sqlite3

    db = Path(_prefect_home) / "prefect.db"
    if template is not None and template.is_file() and not db.exists():
        shutil.copyfile(template, db)
    start(server)
    if template is not None and not template.is_file() and db.is_file():
        tmp = template.with_name(f"{template.name}.{os.getpid()}.tmp")
        with sqlite3.connect(db) as src, sqlite3.connect(tmp) as dst:
            src.backup(dst)  # a snapshot of the live (WAL) database, whatever the server writes meanwhile
        src.close(), dst.close()
        os.replace(tmp, template)  # atomic: two workers may both write it


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-random-model"))


@pytest.fixture(scope="session")
def tiny_overrides(tiny_model_dir) -> list[str]:
    return [f"model.path={tiny_model_dir}", *TINY_OVERRIDES]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, tiny_overrides) -> SimpleNamespace:
    """The tiny run, finished: `.run` (RunDir, id `tiny`), `.cfg`, `.overrides`. Shared by every test
    of the session: treat it as read-only and damage or resume a `copy_run` of it."""
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    overrides = tiny_overrides + MOVING
    cfg = load_config("tiny", overrides)
    run = train(RunDir.for_run(TINY_RUN_ID, tmp_path_factory.mktemp("tiny-run")), cfg)
    return SimpleNamespace(run=run, cfg=cfg, overrides=overrides)


@pytest.fixture(scope="session")
def verified_run(tmp_path_factory, tiny_overrides):
    """(RunDir, config) of a tiny run stopped before its first update, with random non-zero
    advantages (tests.helpers.update_run). Read-only: update a copy (`update_copy`)."""
    from tests.helpers.update_run import make_verified_run

    return make_verified_run(tmp_path_factory.mktemp("launchers"), tiny_overrides)


@pytest.fixture
def runs_dir(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    monkeypatch.setenv("TS_RUNS_DIR", str(path))
    return path


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """The environment for a child process (reads TS_RUNS_DIR at call time, so use after runs_dir)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture
def python_ctrl_c():
    """Python's own SIGINT handler (KeyboardInterrupt) for a test that sends itself a Ctrl-C, whatever
    an earlier test's library left installed; restored afterwards."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture(scope="session", autouse=True)
def _stop_prefect_temporary_server():
    """Stop the temporary Prefect server (if a test started one) while pytest's streams are open;
    Prefect's own atexit hook would log into closed capture streams."""
    yield
    import sys

    if _prefect_start is not None:
        _prefect_start.join(timeout=180)  # not stopped while it starts
    server = sys.modules.get("prefect.server.api.server")
    if server is not None:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)  # send pending flow-run logs while the server is still up
        for instance in list(server.SubprocessASGIServer._instances.values()):
            instance.stop()
