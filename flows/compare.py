"""The comparison flow: methods x seeds (x sweeps) on one budget, the SFT control, the report.

Its one parameter is the ComparisonSpec `ts compare` builds (thinking_seeds.experiments.spec; a
pydantic model, so a deployment can pass it as JSON). The steps are thinking_seeds.experiments.compare's
(its module docstring says what each does), one task each: select, prepare, protocol, runs, SFT control,
final test, archive, report.

Every step is resumable: completed runs and controls are skipped (archived ones too), so re-running
the same command finishes an interrupted comparison and rewrites the report. `ts compare` calls
this flow (or, with --no-prefect, the same functions in order: `compare.run_comparison`).

    ts compare --methods grpo,thinking_seeds --seeds 0,1 --id demo
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from thinking_seeds.experiments.compare import (
    prepare,
    register,
    run_all,
    run_final_tests,
    run_selection,
    run_spec_controls,
    write_report,
)
from thinking_seeds.experiments.compare_archive import archive_finished, archiver
from thinking_seeds.experiments.jobs import JobResult, raise_on_failures
from thinking_seeds.experiments.run_spec import RunSpec
from thinking_seeds.experiments.spec import ComparisonSpec
from thinking_seeds.flows.run_errors import user_errors_in_one_line
from thinking_seeds.store.run_dir import runs_root
from thinking_seeds.tasks.artifacts import artifact_key


def _publish(results: Sequence[JobResult], spec: ComparisonSpec, name: str, description: str) -> None:
    """The jobs' results as the flow run's table artifact `name`; then CompareError if any failed."""
    rows = [
        {"run": r.run_id, "status": r.status, "exit": r.returncode, "seconds": round(r.seconds, 1), "log": r.log}
        for r in results
    ]
    create_table_artifact(rows, key=artifact_key(spec.compare_id, name), description=description)
    raise_on_failures(results)


@task(name="compare-select", cache_policy=NO_CACHE)
def select_task(spec: ComparisonSpec, runs_dir: str) -> tuple[ComparisonSpec, dict[str, Any] | None]:
    return run_selection(spec, Path(runs_dir))


@task(name="compare-runs", cache_policy=NO_CACHE)
def runs_task(spec: ComparisonSpec, specs: list[RunSpec], runs_dir: str) -> list[JobResult]:
    results = run_all(
        specs,
        Path(runs_dir),
        parallel=spec.parallel,
        on_done=archiver(spec, specs, Path(runs_dir)),
        final_test=spec.final_test,
    )
    _publish(results, spec, "runs", f"runs of comparison {spec.compare_id}")
    return results


@task(name="sft-control", cache_policy=NO_CACHE)
def control_task(spec: ComparisonSpec, specs: list[RunSpec], runs_dir: str) -> float:
    budget, results = run_spec_controls(spec, specs, Path(runs_dir))
    _publish(results, spec, "sft-control", f"SFT controls of comparison {spec.compare_id} (budget {budget:.1f} s)")
    return budget


@task(name="final-test", cache_policy=NO_CACHE)
def final_test_task(spec: ComparisonSpec, specs: list[RunSpec], runs_dir: str) -> None:
    results = run_final_tests(spec, specs, Path(runs_dir), on_done=archiver(spec, specs, Path(runs_dir)))
    _publish(results, spec, "final-test", f"final test evaluations of comparison {spec.compare_id}")


@task(name="compare-archive", cache_policy=NO_CACHE)
def archive_task(spec: ComparisonSpec, specs: list[RunSpec], runs_dir: str) -> list[str]:
    return archive_finished(spec, specs, Path(runs_dir))


@task(name="compare-report", cache_policy=NO_CACHE)
def report_task(spec: ComparisonSpec, runs_dir: str) -> str:
    path = write_report(spec, Path(runs_dir))
    create_markdown_artifact(
        path.read_text()[:50_000], key=artifact_key(spec.compare_id, "report"), description=f"comparison report {path}"
    )
    return str(path)


@flow(name="compare", flow_run_name="compare-{spec.compare_id}", log_prints=True)
@user_errors_in_one_line
def compare_flow(spec: ComparisonSpec) -> str:
    """Run (or resume) a comparison and write its report; returns the report's path."""
    log = get_run_logger()
    runs_dir = str(runs_root())
    selection = None
    if spec.select:
        spec, selection = select_task(spec, runs_dir)
        log.info("selected on validation: %s", selection["chosen"])
    specs = prepare(spec, Path(runs_dir))
    register(spec, specs, Path(runs_dir), selection)  # the protocol, before the first confirmatory run
    log.info(
        "comparison %s: %d runs (%s), %d at once, runs in %s",
        spec.compare_id,
        len(specs),
        spec.plan_text(),
        spec.parallel,
        runs_dir,
    )
    if spec.archive:
        archive_task(spec, specs, runs_dir)  # what finished before --archive was given
    runs_task(spec, specs, runs_dir)
    if spec.control:
        budget = control_task(spec, specs, runs_dir)
        log.info("SFT control trained for %.1f s per seed", budget)
    if spec.final_test:
        final_test_task(spec, specs, runs_dir)
    if spec.archive:
        log.info("archived: %s", ", ".join(archive_task(spec, specs, runs_dir)) or "nothing new")
    path = report_task(spec, runs_dir)
    log.info("report: %s", path)
    return path
