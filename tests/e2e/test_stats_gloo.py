"""Update statistics across two gloo processes (accelerate, as the update launcher runs them): the
logged mean, max, min and sum are those of the whole batch in one process. The reducer by hand:
unit/test_stats.py; the driver: tests/helpers/stats_driver.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from tests.helpers import stats_driver
from tests.helpers.stats_driver import TEST_METRICS, assert_union, batch, shard, stats_of
from thinking_seeds.algo.stats import METRICS


@pytest.fixture
def test_metrics(monkeypatch):
    """Declare the driver's sum and min metrics for this test only."""
    for name, kind in TEST_METRICS.items():
        monkeypatch.setitem(METRICS, name, kind)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_gloo_processes_log_the_statistics_of_the_union(tmp_path, subprocess_env, test_metrics):
    """Two CPU processes (accelerate + gloo, as the update launcher runs them) see different
    sequences; the logged mean, max, min and sum are those of the whole batch in one process."""
    out = tmp_path / "metrics.json"
    driver = stats_driver.__file__
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--multi_gpu",
        "--main_process_port",
        str(_free_port()),
        str(driver),
        str(out),
    ]
    proc = subprocess.run(cmd, env=subprocess_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    whole = batch()
    halves = [stats_of(shard(whole, r, 2)) for r in range(2)]
    assert_union(json.loads(out.read_text()), stats_of(whole).metrics(), halves)
