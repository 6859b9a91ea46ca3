"""The comparison flow: methods x seeds (x sweeps) on one budget, the SFT control, the report.

Its one parameter is the ComparisonSpec `ts compare` builds (thinking_seeds.experiments.spec; a
pydantic model, so a deployment can pass it as JSON). The steps are thinking_seeds.experiments.compare's:

    select        with spec.select: the grid for every method on validation; each gets its best value
    prepare       plan the runs (budgets checked equal), restore archived runs, check --reference
    protocol      register it in <out_dir>/<compare_id>/protocol.json before the first run
    runs          run_all: one `python -m thinking_seeds.pipeline.loop` process per run, `parallel` at once
    sft control   sft_control.run_controls: more warm-up for the mean RL training time, per seed
    final test    run_final_tests: every final policy (and θ_0) on the whole test split
    archive       with spec.archive: each finished run's small files into <out_dir>/<compare_id>/runs/
    report        write_report -> <out_dir>/<compare_id>/report.md

Every step is resumable: completed runs and controls are skipped (archived ones too), so re-running
the same command finishes an interrupted comparison and rewrites the report. `ts compare` calls
this flow (or, with --no-prefect, the same functions in order: `compare.run_comparison`).

    python -m thinking_seeds.flows.compare --methods grpo,thinking_seeds --seeds 0,1 --id demo
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
    write_report,
)
from thinking_seeds.experiments.compare_archive import archive_finished, archiver
from thinking_seeds.experiments.jobs import JobResult, raise_on_failures
from thinking_seeds.experiments.run_spec import RunSpec
from thinking_seeds.experiments.sft_control import run_controls
from thinking_seeds.experiments.spec import ComparisonSpec
from thinking_seeds.store.run_dir import runs_root
from thinking_seeds.tasks.artifacts import artifact_key


def _rows(results: Sequence[JobResult]) -> list[dict[str, Any]]:
    return [
        {"run": r.run_id, "status": r.status, "exit": r.returncode, "seconds": round(r.seconds, 1), "log": r.log}
        for r in results
    ]


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
    create_table_artifact(
        _rows(results), key=artifact_key(spec.compare_id, "runs"), description=f"runs of comparison {spec.compare_id}"
    )
    raise_on_failures(results)
    return results


@task(name="sft-control", cache_policy=NO_CACHE)
def control_task(spec: ComparisonSpec, specs: list[RunSpec], runs_dir: str) -> float:
    budget, results = run_controls(
        specs,
        Path(runs_dir),
        parallel=spec.parallel,
        budget_seconds=spec.control_seconds,
        seeds=spec.control_seed_list(specs),
        max_steps=spec.control_max_steps,
        corpus_size=spec.control_corpus_size,
        report_dir=spec.report_dir,  # the controls' archived and registered configs (recorded_defaults.py)
    )
    create_table_artifact(
        _rows(results),
        key=artifact_key(spec.compare_id, "sft-control"),
        description=f"SFT controls of comparison {spec.compare_id} (budget {budget:.1f} s)",
    )
    raise_on_failures(results)
    return budget


@task(name="final-test", cache_policy=NO_CACHE)
def final_test_task(spec: ComparisonSpec, specs: list[RunSpec], runs_dir: str) -> None:
    results = run_final_tests(
        specs,
        Path(runs_dir),
        spec.parallel,
        spec.control_seed_list(specs) if spec.control else False,
        on_done=archiver(spec, specs, Path(runs_dir)),
    )
    create_table_artifact(
        _rows(results),
        key=artifact_key(spec.compare_id, "final-test"),
        description=f"final test evaluations of comparison {spec.compare_id}",
    )
    raise_on_failures(results)


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


if __name__ == "__main__":  # pragma: no cover
    import argparse
    import shlex
    import sys

    ap = argparse.ArgumentParser(description="Run the comparison flow (`ts compare` calls it too).")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--methods", default=",".join(ComparisonSpec().methods))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2")
    ap.add_argument("--id", dest="compare_id", default="compare")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--out", default="docs/results")
    ap.add_argument("--no-control", action="store_true")
    ap.add_argument("--one-at-a-time", action="store_true")
    ap.add_argument("--reference", default=None)
    ap.add_argument("--no-final-test", action="store_true")
    ap.add_argument("--archive", action="store_true")
    ap.add_argument("--primary", default=None)
    ap.add_argument("--amend-protocol", action="store_true")
    ap.add_argument("--select", default=None, metavar="KEY=V1,V2")
    ap.add_argument("--select-seeds", default="0-2")
    a = ap.parse_args()
    cmd = " ".join(shlex.quote(x) for x in ["python", "-m", "thinking_seeds.flows.compare", *sys.argv[1:]])
    print(
        compare_flow(
            ComparisonSpec.of(
                preset=a.preset,
                methods=a.methods,
                seeds=a.seeds,
                overrides=a.overrides,
                sweep=a.sweep,
                compare_id=a.compare_id,
                parallel=a.parallel,
                out_dir=a.out,
                control=not a.no_control,
                one_at_a_time=a.one_at_a_time,
                reference=a.reference,
                final_test=not a.no_final_test,
                archive=a.archive,
                primary=a.primary,
                amend_protocol=a.amend_protocol,
                select=[a.select] if a.select else None,
                select_seeds=a.select_seeds,
                command=cmd,
            )
        )
    )
