"""The comparison experiment: methods x seeds (x ablation sweeps) on one task and one budget.

    spec = ComparisonSpec.of(compare_id="abl", methods="grpo,thinking_seeds", seeds="0,1,2",
                             overrides=["iterations=60"], sweep=["prefix.ratio_max=0.4,0.8"])
    run_comparison(spec)        # plan -> runs -> SFT controls -> final tests -> report, all resumable

The steps, each a function the Prefect flow (thinking_seeds.flows.compare) calls as a task too:

    select           with spec.select: the grid for every method on validation (selection.py),
                     each method's best value becomes its method override
    prepare          spec.runs() (run_spec.py: plan, budgets checked), each run given the old value of a
                     changed default that the comparison's record of it holds (recorded_defaults.py),
                     runs restored from the committed archives (archive.py), the --reference base point checked
    register         the protocol (protocol.py) into OUT/ID/protocol.json before the first run;
                     a changed one is refused unless spec.amend_protocol
    run_all          one `python -m thinking_seeds.pipeline.loop` per run, `parallel` at once (jobs.py);
                     a complete run starts no process, an interrupted one resumes
    run_controls     the equal-compute SFT control per seed (sft_control.py)
    run_final_tests  every final policy (and θ_0 once) on the whole test split
    archive_finished with spec.archive: the small files of every finished run into OUT/ID/runs/ (compare_archive.py)
    write_report     compare_report.write_compare_report -> OUT/ID/report.md

This module is the top of the experiments package: it imports the others, none imports it. Never
imports prefect (flows/compare.py wraps this). Which runs the archive restores and takes is
compare_archive.py's (restore_archived, archive_finished, archiver).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError
from thinking_seeds.experiments.compare_archive import archive_finished, archiver, restore_archived
from thinking_seeds.experiments.equal_iterations import equal_iterations_plan
from thinking_seeds.experiments.jobs import Job, JobResult, checkpoint_eval_cmd, raise_on_failures, run_jobs
from thinking_seeds.experiments.members import archive_record, is_complete, reference_members, write_marker
from thinking_seeds.experiments.protocol import load as load_protocol
from thinking_seeds.experiments.protocol import register
from thinking_seeds.experiments.recorded_defaults import with_recorded_defaults
from thinking_seeds.experiments.run_spec import RunSpec
from thinking_seeds.experiments.selection import (
    choose,
    resolve_key,
    selection_record,
    selection_specs,
    selection_table,
    validation_jobs,
    with_selection,
)
from thinking_seeds.experiments.sft_control import control_run_id, run_controls
from thinking_seeds.experiments.spec import ComparisonSpec
from thinking_seeds.pipeline.checkpoint_eval import FINAL_TEST_STAGE

__all__ = [
    "ComparisonSpec",
    "final_test_jobs",
    "prepare",
    "register",
    "run_all",
    "run_comparison",
    "run_final_tests",
    "run_selection",
    "run_spec_controls",
    "train_jobs",
    "write_report",
]


# ---------------------------------------------------------------------------------------------
# the steps
# ---------------------------------------------------------------------------------------------


def prepare(spec: ComparisonSpec, runs_dir: Path) -> list[RunSpec]:
    """Plan the runs (budgets checked), restore archived ones, check the --reference base point:
    everything that can fail before a run is started. Returns the planned runs, each with the old
    defaults the comparison's record of it holds (recorded_defaults.py: its runs folder, archive, protocol)."""
    specs = with_recorded_defaults(spec.runs(), Path(runs_dir), spec.report_dir)
    restore_archived(spec, specs, Path(runs_dir))
    if spec.reference:
        reference_members(spec.reference, specs, Path(runs_dir))  # it exists, complete, on the same budget
    return specs


def run_all(
    specs: Sequence[RunSpec],
    runs_dir: Path,
    parallel: int = 2,
    console: Any = None,
    on_done: Callable[[Job], None] | None = None,
    final_test: bool = True,
) -> list[JobResult]:
    """Train every spec (resumable; complete runs are skipped) and return one JobResult per spec.

    Seed by seed (methods in their order within a seed): a comparison stopped half-way leaves
    complete paired sets (every method at seeds 0..s) rather than all seeds of the first methods.
    Each run's final test follows its training in the same process (`thinking_seeds.pipeline.loop
    --final-test`), so such a partial comparison has test numbers too (the report can be written
    at any time). `final_test=False` (the validation selection's runs) never reads the test split.
    """
    runs_dir = Path(runs_dir).resolve()
    jobs = train_jobs(specs, runs_dir, final_test)
    return run_jobs(jobs, runs_dir, parallel, title="runs", console=console, on_done=on_done)


def train_jobs(specs: Sequence[RunSpec], runs_dir: Path, final_test: bool = True) -> list[Job]:
    """run_all's jobs, seed by seed, each run's marker written: one `thinking_seeds.pipeline.loop`
    process per run, with `--final-test` (and θ_0's, in the first run) only when `final_test`."""
    runs_dir = Path(runs_dir).resolve()
    configs = {s.run_id: s.config() for s in specs}
    # A method given more iterations to match compute is also tested at the others' count, while its
    # checkpoints exist (equal_iterations.py; the report pairs it with their final tests).
    plan = equal_iterations_plan({s.method: configs[s.run_id].iterations for s in specs}) if final_test else None
    jobs = []
    for spec in sorted(specs, key=lambda sp: sp.seed):
        root = runs_dir / spec.run_id
        write_marker(root, spec.marker())
        cmd = [
            sys.executable,
            "-m",
            "thinking_seeds.pipeline.loop",
            "--preset",
            spec.preset,
            "--run-id",
            spec.run_id,
            "--runs-dir",
            str(runs_dir),
        ]
        if final_test:
            cmd.append("--final-test")
        if final_test and spec is specs[0]:
            cmd.append("--final-test-base")  # θ_0 once per comparison, in the run final_test_jobs names
        if plan and spec.method == plan[0]:
            cmd += ["--equal-iterations", str(plan[1])]
        for o in (*spec.overrides, *spec.kept):  # kept: what the plan hashed (recorded_defaults.py)
            cmd += ["--set", o]
        jobs.append(Job(spec.run_id, cmd, root / "train.log", done=is_complete(spec, runs_dir), run_root=root))
    return jobs


def final_test_jobs(run_ids: Sequence[str], runs_dir: Path, base_of: str | None = None) -> list[Job]:
    """One `python -m thinking_seeds.pipeline.checkpoint_eval` job per run: its final policy on the
    whole test split.

    Metrics go to the run's `metrics/iteration=<final step>/final-test.parquet` (a job whose file
    exists is done; a run restored from the archive has its final test). `base_of` also evaluates
    θ_0 of that run (the base model every run starts from) into its iteration 0. The in-training
    evaluation (64 validation prompts) is too noisy to separate methods by a point; see
    thinking_seeds.pipeline.checkpoint_eval.
    """
    from thinking_seeds.config import load_saved_config
    from thinking_seeds.pipeline.checkpoint_eval import latest_policy_step
    from thinking_seeds.store.run_dir import RunDir

    jobs = []
    targets = [(rid, None) for rid in run_ids] + ([(base_of, 0)] if base_of else [])
    for rid, step in targets:
        run = RunDir.for_run(rid, runs_dir)
        cfg = load_saved_config(run.config_path)
        restored = archive_record(run.root) is not None  # no checkpoints: its final test came with it
        step = (cfg.iterations if restored else latest_policy_step(run)) if step is None else step
        cmd = checkpoint_eval_cmd(run.root, step, "test", FINAL_TEST_STAGE, cfg.eval.test_samples)
        jobs.append(
            Job(
                f"{rid} θ_{step}",
                cmd,
                run.root / "final_test.log",
                done=restored or run.metrics(step, FINAL_TEST_STAGE).exists(),
                run_root=run.root,
            )
        )
    return jobs


def run_spec_controls(
    spec: ComparisonSpec, specs: Sequence[RunSpec], runs_dir: Path, console: Any = None
) -> tuple[float, list[JobResult]]:
    """The comparison's SFT controls (sft_control.run_controls with spec's settings): the budget, the results."""
    return run_controls(
        specs,
        runs_dir,
        parallel=spec.parallel,
        budget_seconds=spec.control_seconds,
        seeds=spec.control_seed_list(specs),
        max_steps=spec.control_max_steps,
        corpus_size=spec.control_corpus_size,
        console=console,
        report_dir=spec.report_dir,  # the controls' archived and registered configs (recorded_defaults.py)
    )


def run_final_tests(
    spec: ComparisonSpec,
    specs: Sequence[RunSpec],
    runs_dir: Path,
    console: Any = None,
    on_done: Callable[[Job], None] | None = None,
) -> list[JobResult]:
    """The final test evaluation of every run of `specs` and of the comparison's SFT controls, plus θ_0 once."""
    seeds = spec.control_seed_list(specs) if spec.control else []
    ids = [s.run_id for s in specs] + [control_run_id(specs[0].compare_id, seed) for seed in seeds]
    jobs = final_test_jobs(ids, Path(runs_dir), base_of=specs[0].run_id)
    title = "final test evaluations"
    return run_jobs(jobs, Path(runs_dir), spec.parallel, title=title, console=console, on_done=on_done)


def write_report(spec: ComparisonSpec, runs_dir: Path) -> Path:
    """The report of the runs there are now under `runs_dir` (after `prepare`, archived runs
    included): OUT/ID/report.md, results.parquet and the plots."""
    from thinking_seeds.experiments.compare_report import write_compare_report

    specs = spec.runs()
    planned = len(specs) + (len(spec.control_seed_list(specs)) if spec.control else 0)
    return write_compare_report(
        spec.compare_id,
        Path(runs_dir),
        spec.report_dir,
        command=spec.command,
        reference=spec.reference,
        planned=planned,
    )


def run_selection(
    spec: ComparisonSpec, runs_dir: Path, console: Any = None, train: bool = True
) -> tuple[ComparisonSpec, dict[str, Any] | None]:
    """With spec.select: train the grid for every method (resumable), evaluate each final policy on
    the whole validation split, choose per method (selection.choose); returns the spec with the
    chosen values as method overrides, and the selection's record for the protocol.

    Once the protocol registers a choice for this grid (and every tuned method), that choice is
    used and nothing trains. Otherwise `train=False` (`--report-only`) trains nothing and reads the
    selection runs already evaluated.
    """
    if not spec.select:
        return spec, None
    specs = with_recorded_defaults(selection_specs(spec), Path(runs_dir), spec.report_dir)
    protocol = load_protocol(spec.report_dir)
    registered = (protocol or {}).get("protocol", {}).get("selection")
    asked = {"key": resolve_key(next(iter(spec.select))), "grid": list(next(iter(spec.select.values())))}
    asked["seeds"] = list(spec.select_seeds)
    if protocol and not spec.amend_protocol and {k: (registered or {}).get(k) for k in asked} != asked:
        raise ConfigError(  # before the grid trains: a new grid is a new protocol
            f"{spec.report_dir / 'protocol.json'} registers the selection {registered}, this command asks for "
            f"{asked}; rerun with the registered one, or add --amend-protocol to record the change as an amendment"
        )
    # A registered selection is binding: its choice is reused, not retrained (a fresh clone resumes
    # the confirmatory runs from the archive and the protocol, without the selection's run folders).
    tuned = spec.select_methods or [m.split(":", 1)[0] for m in spec.methods]
    if registered and registered["grid"] == asked["grid"] and set(tuned) <= set(registered.get("chosen") or {}):
        return with_selection(spec, registered["chosen"]), registered
    if train:
        raise_on_failures(run_all(specs, runs_dir, spec.parallel, console=console, final_test=False))
        jobs = validation_jobs(specs, Path(runs_dir))
        raise_on_failures(run_jobs(jobs, Path(runs_dir), spec.parallel, title="selection evaluations", console=console))
    table = selection_table(specs, Path(runs_dir))
    chosen = choose(table, next(iter(spec.select.values())))
    return with_selection(spec, chosen), selection_record(spec, table, chosen)


def run_comparison(spec: ComparisonSpec, console: Any = None) -> str:
    """prepare -> run_all -> SFT controls -> final tests -> (archive) -> report, in this process
    (`ts compare --no-prefect`); the same steps as `thinking_seeds.flows.compare.compare_flow`.

    Runs go to `runs_root()`. Raises CompareError when a run or control failed (after all the
    others finished). Returns the report's path.
    """
    from thinking_seeds.store.run_dir import runs_root

    runs_dir = runs_root()
    spec, selection = run_selection(spec, runs_dir, console=console)
    specs = prepare(spec, runs_dir)
    register(spec, specs, runs_dir, selection)  # before the first confirmatory run
    hook = archiver(spec, specs, runs_dir)
    if spec.archive:
        archive_finished(spec, specs, runs_dir)  # what finished before --archive was given
    raise_on_failures(
        run_all(specs, runs_dir, parallel=spec.parallel, console=console, on_done=hook, final_test=spec.final_test)
    )
    if spec.control:
        raise_on_failures(run_spec_controls(spec, specs, runs_dir, console)[1])
    if spec.final_test:
        raise_on_failures(run_final_tests(spec, specs, runs_dir, console=console, on_done=hook))
    if spec.archive:
        archive_finished(spec, specs, runs_dir)
    return str(write_report(spec, runs_dir))
