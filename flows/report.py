"""The report flow: a thin Prefect wrapper around `thinking_seeds.evals.report.write_report`.

prefect deploy ... flows/report.py:report_flow      |  ts report RUN_ID
"""

from __future__ import annotations

import time

from prefect import flow

from thinking_seeds.evals.report import write_report
from thinking_seeds.flows.run_errors import user_errors_in_one_line
from thinking_seeds.store.compaction import compact
from thinking_seeds.store.run_dir import RunDir


@flow(name="report", log_prints=True)
@user_errors_in_one_line
def report_flow(run_id: str) -> str:
    """Compact the run's finished metrics files (store/compaction.py: the queries then open a few
    files, not thousands), write runs/<run_id>/reports/report.md (+ PNG plots) and return its path;
    the log has how long it took, step by step (the corpus-report deployment runs every 6 h)."""
    t = time.perf_counter()
    parts = compact(RunDir.for_run(run_id).root)
    timings: dict[str, float] = {"compact": time.perf_counter() - t}
    failures: dict[str, str] = {}
    path = write_report(run_id, timings=timings, failures=failures)
    print(f"compacted: {len(parts)} new or refreshed part(s)")
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    print(f"report written in {time.perf_counter() - t:.1f} s ({steps}): {path}")
    for name, why in failures.items():
        print(f"named query {name} failed, its table says so: {why}")
    return str(path)
