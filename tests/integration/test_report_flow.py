"""flows.report's flow body (`report_flow.fn`) over a hand-made run: it wraps write_report and logs its time.

Here, not in tests/unit: the flow publishes the report as artifacts, which needs Prefect's temporary server
(conftest.py starts it while the unit tests run; a unit test that needs it waits for its start)."""

from __future__ import annotations

import pytest

from tests.helpers.synthetic_run import make_run
from thinking_seeds.evals.report import write_report
from thinking_seeds.store.sql import NAMED_QUERIES

pytest.importorskip("prefect")


@pytest.fixture
def syn(tmp_path, monkeypatch):
    make_run(tmp_path, "syn")
    monkeypatch.setenv("TS_RUNS_DIR", str(tmp_path))
    return tmp_path


def test_report_flow_wraps_write_report(syn):
    from thinking_seeds.flows.report import report_flow

    path = write_report("syn", syn)
    assert report_flow.fn("syn") == str(path)


def test_report_flow_logs_its_time(syn, capsys):
    from thinking_seeds.flows.report import report_flow

    path = report_flow.fn("syn")
    out = capsys.readouterr().out
    assert f": {path}" in out and "report written in " in out
    for step in ("connect", *NAMED_QUERIES, "plots"):
        assert f"{step} " in out
    assert (syn / "syn" / "reports" / "prefix_diversity.png").stat().st_size > 5000
