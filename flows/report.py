"""The report flow: a thin Prefect wrapper around `thinking_seeds.evals.report.write_report`.

prefect deploy ... flows/report.py:report_flow      |  ts report RUN_ID
"""

from __future__ import annotations

from prefect import flow

from thinking_seeds.evals.report import write_report


@flow(name="report", log_prints=True)
def report_flow(run_id: str) -> str:
    """Write runs/<run_id>/reports/report.md (+ PNG plots) and return its path."""
    path = write_report(run_id)
    print(f"report written: {path}")
    return str(path)


if __name__ == "__main__":  # pragma: no cover
    import sys

    report_flow(sys.argv[1])
