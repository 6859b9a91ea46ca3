"""Shared test fixtures and environment.

Environment (set before torch or prefect is imported by any test module):
- one torch thread (SPEC §7: with the other core busy, two threads run 10-40x slower);
- Prefect: no analytics, and a private PREFECT_HOME for the session so tests never touch
  ~/.prefect (each flow run in a test starts a temporary local server on that home's database).

Fixtures:
- `tiny_model_dir`: a random-weights ~20k-parameter Llama with the chain_sum character tokenizer,
  built once per session (rewards are ~0 with it; use it for plumbing, not learning).
- `tiny_overrides`: `--set` overrides for a run of a few seconds on that model.
- `runs_dir`: a fresh TS_RUNS_DIR for one test.
- `subprocess_env`: os.environ for child processes (same threads, Prefect home and runs dir).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

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

REPO_ROOT = Path(__file__).resolve().parent.parent

# A run of a few seconds on the random tiny model (add model.path=...).
TINY_OVERRIDES = [
    "iterations=2",
    "rollout.prompts_per_iteration=4",
    "data.train_size=50",
    "data.val_size=8",
    "data.test_size=8",
    "eval.prompts=4",
    "eval.samples=4",
    "pool.snapshot_every=1",
]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from thinking_seeds.data.chain_sum import CHARSET
    from thinking_seeds.engine.models import char_tokenizer, tiny_llama

    path = tmp_path_factory.mktemp("tiny-random-model")
    tok = char_tokenizer(CHARSET)
    torch.manual_seed(0)
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_overrides(tiny_model_dir) -> list[str]:
    return [f"model.path={tiny_model_dir}", *TINY_OVERRIDES]


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
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="session", autouse=True)
def _stop_prefect_temporary_server():
    """Stop the temporary Prefect server (if a test started one) while pytest's streams are open;
    Prefect's own atexit hook would log into closed capture streams."""
    yield
    import sys

    server = sys.modules.get("prefect.server.api.server")
    if server is not None:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)  # send pending flow-run logs while the server is still up
        for instance in list(server.SubprocessASGIServer._instances.values()):
            instance.stop()
