"""The report flow in the UI (issue 50, item 4): its run is named `report-<run id>`, its progress is in
the flow run's log, and the report is published: the Markdown with every plot in it, and each of its
tables as a table artifact, read back from the Prefect API after a real run (~8 s on the tiny run: the
named queries and the plots, hence the slow suite)."""

from __future__ import annotations

import json
from pathlib import Path

from prefect.client.orchestration import get_client

from tests.helpers.tiny import copy_run
from tests.integration.test_train_flow import _artifacts, _flow_run_log
from thinking_seeds.flows.report import report_flow
from thinking_seeds.tasks.artifacts import artifact_key


def test_report_flow_is_named_after_the_run_and_publishes_the_report(tiny_run, runs_dir):
    run = copy_run(tiny_run.run, runs_dir)
    state = report_flow(run_id=run.run_id, return_state=True)
    path = Path(state.result())
    flow_run_id = str(state.state_details.flow_run_id)

    def published(*key: str) -> list[dict]:
        return [a for a in _artifacts(artifact_key(run.run_id, *key)) if a["flow_run_id"] == flow_run_id]

    with get_client(sync_client=True) as client:
        assert client.read_flow_run(flow_run_id).name == f"report-{run.run_id}"
    [report] = published("report")
    assert report["type"] == "markdown" and report["data"].startswith(f"# Report: {run.run_id}")
    pngs = sorted(path.parent.glob("*.png"))
    assert pngs and report["data"].count("](data:image/png;base64,") == len(pngs)  # every plot, in the artifact
    [runs] = published("report", "runs")
    assert runs["type"] == "table"
    [row] = json.loads(runs["data"])
    assert row["iterations_done"] == tiny_run.cfg.iterations  # the report's `runs` table (`ts sql --query runs`)
    for name in ("entropy_accuracy", "prefix_diversity"):
        assert len(published("report", name)) == 1, name
    log = _flow_run_log(state)
    assert any(m.startswith("compacted: ") for m in log) and any(m.startswith("published: artifact") for m in log)
