"""The report flow: a thin Prefect wrapper around `thinking_seeds.evals.report.write_report`.

The report is published in the UI too (Artifacts): `<run-id>-report`, the Markdown with its plots in it
(as data URIs: the UI cannot read the run directory), and `<run-id>-report-<table>`, one table artifact
per table of the report (the named queries' rows). Each run of the flow adds a new version of each.

prefect deploy ... flows/report.py:report_flow      |  ts report RUN_ID
"""

from __future__ import annotations

import base64
import math
import re
import time
from pathlib import Path
from typing import Any

from prefect import flow

from thinking_seeds.evals.report import write_report
from thinking_seeds.flows.run_errors import user_errors_in_one_line
from thinking_seeds.store.compaction import compact
from thinking_seeds.store.run_dir import RunDir

MAX_EMBEDDED_PLOT_BYTES = 2_000_000  # a larger PNG is named, not embedded (the artifact lives in Prefect's database)


@flow(name="report", flow_run_name="report-{run_id}", log_prints=True)
@user_errors_in_one_line
def report_flow(run_id: str) -> str:
    """Compact the run's finished metrics files (store/compaction.py: the queries then open a few
    files, not thousands), write runs/<run_id>/reports/report.md (+ PNG plots), publish it as artifacts
    and return its path; the log has how long it took, step by step (the corpus-report deployment runs
    every 6 h)."""
    t = time.perf_counter()
    root = RunDir.for_run(run_id).root
    parts = []
    if root.is_dir():  # else write_report says in one line that there is no such run
        print(f"report of run {run_id}: compacting its metrics files")
        parts = compact(root)
        print(f"compacted: {len(parts)} new or refreshed part(s); running the named queries and drawing the plots")
    timings: dict[str, float] = {"compact": time.perf_counter() - t}
    failures: dict[str, str] = {}
    tables: dict[str, list[dict[str, Any]]] = {}
    path = write_report(run_id, timings=timings, failures=failures, tables=tables)
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    print(f"report written in {time.perf_counter() - t:.1f} s ({steps}): {path}")
    for name, why in failures.items():
        print(f"named query {name} failed, its table says so: {why}")
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is not None:  # a flow run (`report_flow.fn` alone has no Prefect API to publish to)
        key = publish_report(run_id, path, tables)
        print(f"published: artifact {key} and {len(tables)} table(s)")
    return str(path)


def publish_report(run_id: str, path: Path, tables: dict[str, list[dict[str, Any]]]) -> str:
    """The report as a Markdown artifact with its plots embedded, and each of its tables as a table artifact;
    returns the Markdown artifact's key."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact  # Prefect's client: in a flow run

    from thinking_seeds.tasks.artifacts import artifact_key  # here: the tasks package imports torch

    create_markdown_artifact(
        _with_plots_embedded(path.read_text(), path.parent),
        key=artifact_key(run_id, "report"),
        description=f"run {run_id}: report ({path})",
    )
    for name, rows in tables.items():
        create_table_artifact(
            [{k: _json_cell(v) for k, v in row.items()} for row in rows],
            key=artifact_key(run_id, "report", name),
            description=f"run {run_id}: {name} (`ts sql --query {name} --run-id {run_id}`)",
        )
    return artifact_key(run_id, "report")


def _with_plots_embedded(markdown: str, folder: Path) -> str:
    """`![title](plot.png)` -> the PNG as a data URI (a missing or too large one: its path, in words)."""

    def embed(m: re.Match) -> str:
        png = folder / m.group(2)
        if not png.is_file() or png.stat().st_size > MAX_EMBEDDED_PLOT_BYTES:
            return f"_plot: `{png}`_"
        return f"![{m.group(1)}](data:image/png;base64,{base64.b64encode(png.read_bytes()).decode('ascii')})"

    return re.sub(r"!\[([^\]]*)\]\(([^)/\s]+\.png)\)", embed, markdown)


def _json_cell(v: Any) -> Any:
    """A table cell as JSON the API takes: NaN and infinities as null, anything unusual as text."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    try:
        f = float(v)  # numpy and Decimal numbers
    except (TypeError, ValueError):
        return str(v)
    return f if math.isfinite(f) else None
