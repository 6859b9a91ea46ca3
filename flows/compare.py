"""The comparison flow: methods x seeds (x sweeps) on one budget, the SFT control, the report.

    plan            thinking_seeds.experiments.compare.plan: run specs; budgets checked equal
    runs            thinking_seeds.experiments.compare.run_all: one `python -m thinking_seeds.pipeline.loop` process per run, `parallel` at once
    sft control     thinking_seeds.experiments.sft_control.run_controls: more warm-up for the mean RL training time, per seed
    final test      thinking_seeds.experiments.compare.run_final_tests: every final policy (and θ_0) on the whole test split
    report          thinking_seeds.experiments.compare_report.write_compare_report -> <out_dir>/<compare_id>/report.md
                    (with `reference`, an earlier comparison's unswept runs as the ablation's base point)

Every step is resumable: completed runs and controls are skipped, so re-running the same command
finishes an interrupted comparison and rewrites the report. `ts compare` calls this flow (or, with
--no-prefect, the same ts_core functions in order: `thinking_seeds.experiments.compare.run_comparison`).

    python -m flows.compare --methods grpo,thinking_seeds --seeds 0,1 --id demo
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from thinking_seeds.tasks.common import artifact_key
from thinking_seeds.experiments.compare import (DEFAULT_METHODS, JobResult, RunSpec, plan, raise_on_failures, reference_members,
                             report_dir, run_all, run_final_tests)
from thinking_seeds.experiments.compare_report import write_compare_report
from thinking_seeds.store.run_dir import runs_root
from thinking_seeds.experiments.sft_control import run_controls



def _rows(results: Sequence[JobResult]) -> list[dict[str, Any]]:
    return [{"run": r.run_id, "status": r.status, "exit": r.returncode, "seconds": round(r.seconds, 1), "log": r.log}
            for r in results]


@task(name="compare-runs", cache_policy=NO_CACHE)
def runs_task(specs: list[RunSpec], runs_dir: str, parallel: int) -> list[JobResult]:
    results = run_all(specs, Path(runs_dir), parallel=parallel)
    create_table_artifact(_rows(results), key=artifact_key(specs[0].compare_id, "runs"),
                          description=f"runs of comparison {specs[0].compare_id}")
    raise_on_failures(results)
    return results


@task(name="sft-control", cache_policy=NO_CACHE)
def control_task(specs: list[RunSpec], runs_dir: str, parallel: int, budget_seconds: float | None,
                 max_steps: int | None = None, corpus_size: int | None = None) -> float:
    budget, results = run_controls(specs, Path(runs_dir), parallel=parallel, budget_seconds=budget_seconds,
                                   max_steps=max_steps, corpus_size=corpus_size)
    create_table_artifact(_rows(results), key=artifact_key(specs[0].compare_id, "sft-control"),
                          description=f"SFT controls of comparison {specs[0].compare_id} (budget {budget:.1f} s)")
    raise_on_failures(results)
    return budget


@task(name="final-test", cache_policy=NO_CACHE)
def final_test_task(specs: list[RunSpec], runs_dir: str, parallel: int, control: bool) -> None:
    results = run_final_tests(specs, Path(runs_dir), parallel, control)
    create_table_artifact(_rows(results), key=artifact_key(specs[0].compare_id, "final-test"),
                          description=f"final test evaluations of comparison {specs[0].compare_id}")
    raise_on_failures(results)


@task(name="compare-report", cache_policy=NO_CACHE)
def report_task(compare_id: str, runs_dir: str, out_dir: str, command: str | None, reference: str | None = None) -> str:
    path = write_compare_report(compare_id, Path(runs_dir), Path(out_dir), command=command, reference=reference)
    create_markdown_artifact(path.read_text()[:50_000], key=artifact_key(compare_id, "report"),
                             description=f"comparison report {path}")
    return str(path)


@flow(name="compare", flow_run_name="compare-{compare_id}", log_prints=True)
def compare_flow(
    preset: str = "tiny",
    methods: list[str] = list(DEFAULT_METHODS),
    seeds: list[int] = [0, 1, 2],
    overrides: list[str] | None = None,
    sweep: dict[str, list[str]] | None = None,
    compare_id: str = "compare",
    parallel: int = 2,
    out_dir: str = "docs/results",
    control: bool = True,
    control_seconds: float | None = None,
    command: str | None = None,
    control_max_steps: int | None = None,
    control_corpus_size: int | None = None,
    one_at_a_time: bool = False,
    reference: str | None = None,
    final_test: bool = True,
) -> str:
    """Run (or resume) a comparison and write its report; returns the report's path."""
    log = get_run_logger()
    specs = plan(preset, methods, seeds, overrides or [], sweep, compare_id, one_at_a_time)
    runs_dir = str(runs_root())
    if reference:
        reference_members(reference, specs, Path(runs_dir))  # the base point exists, on the same budget
    log.info("comparison %s: %d runs (%s x seeds %s), %d at once, runs in %s", compare_id, len(specs),
             ", ".join(methods), seeds, parallel, runs_dir)
    runs_task(specs, runs_dir, parallel)
    if control:
        budget = control_task(specs, runs_dir, parallel, control_seconds, control_max_steps, control_corpus_size)
        log.info("SFT control trained for %.1f s per seed", budget)
    if final_test:
        final_test_task(specs, runs_dir, parallel, control)
    path = report_task(compare_id, runs_dir, str(report_dir(out_dir, compare_id)), command, reference)
    log.info("report: %s", path)
    return path


if __name__ == "__main__":  # pragma: no cover
    import argparse
    import shlex
    import sys

    from thinking_seeds.experiments.compare import parse_list, parse_sweep

    ap = argparse.ArgumentParser(description="Run the comparison flow (`ts compare` calls it too).")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
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
    a = ap.parse_args()
    print(compare_flow(preset=a.preset, methods=parse_list(a.methods, "--methods"),
                       seeds=[int(s) for s in parse_list(a.seeds, "--seeds")], overrides=a.overrides,
                       sweep=parse_sweep(a.sweep) or None, compare_id=a.compare_id, parallel=a.parallel,
                       out_dir=a.out, control=not a.no_control, one_at_a_time=a.one_at_a_time, reference=a.reference,
                       final_test=not a.no_final_test,
                       command=" ".join(shlex.quote(x) for x in ["python", "-m", "flows.compare", *sys.argv[1:]])))
