"""`ts train` (a new run, or resume one: the same command), `ts trainer-node` (another machine of a run's
trainer group) and `ts check` (verify a run directory)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import typer

from thinking_seeds.flows.cli.errors import writing_to
from thinking_seeds.flows.cli.output import console, error_line
from thinking_seeds.pipeline.ctrl_c import raise_if_interrupted

if TYPE_CHECKING:
    from rich.console import Console

PRESET_HELP = "Preset name (data/presets/NAME.yaml) or a YAML path."


def train(
    preset: str = typer.Option("tiny", "--preset", "-p", help=PRESET_HELP),
    run_id: str = typer.Option(
        ..., "--run-id", "-r", help="Run directory name under the runs folder; reusing one resumes it."
    ),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key: section.key=value (repeatable)."),
    no_prefect: bool = typer.Option(False, "--no-prefect", help="Run the plain loop in this process (no Prefect)."),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Also print Prefect's line for every task run (its final state)."
    ),
) -> None:
    """Train (or resume) a run: the stages of every iteration, as a Prefect flow or a plain loop; one
    line per iteration. Raising --set iterations on a finished or stopped run extends it."""
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.resume import continued_config, resume_line
    from thinking_seeds.store.run_dir import RunDir, guard_children

    guard_children()  # first: the Prefect server, the verifier's workers, the trainer die with this process
    cfg = load_config(preset, set_)  # fail fast on a bad preset / key, before Prefect or torch start
    run = RunDir.for_run(run_id)
    _refuse_busy(run)  # a run another process trains: its one line now, before any other line or Prefect
    from thinking_seeds.pipeline.stage_prepare import check_inputs

    check_inputs(run, cfg)  # a user's data sets and model directory: refuse a bad one before anything is written
    from thinking_seeds.train.memory_check import check_fits

    check_fits(cfg, run.data_dir)  # the memory plan (`ts plan`), at the data's prompts: one line when it cannot fit
    cfg = continued_config(run, cfg)  # an existing run started with another config: one line naming the keys
    writing_to(run.root, f"run the same `ts train --run-id {run_id}` again: it resumes where it stopped")
    con = console()
    line = resume_line(run, cfg)
    if line:
        con.print(line)
    try:
        if not no_prefect:
            from thinking_seeds.flows.cli.prefect_server import start_prefect

            start_prefect(verbose)  # the temporary server in its own session: Ctrl-C reaches only ts
            from thinking_seeds.flows.train import train_flow

            train_flow(preset=preset, run_id=run_id, overrides=list(set_) or None)
        else:
            _train_plain(run, cfg, con)
        raise_if_interrupted()  # one that something swallowed (a KeyboardInterrupt in a fork hook is only printed)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted (Ctrl-C); the same command resumes run {run_id}") from None
    con.print(f"[green]run finished:[/] {run.root}")
    con.print(f"next: `ts report {run_id}` (plots and tables), `ts eval {run_id}`, or `ts runs`")


def _refuse_busy(run: Any) -> None:
    from thinking_seeds.store.run_dir import RunLockedError

    state = run.lock_state()
    if state.startswith("held by") and "(this process)" not in state:
        raise RunLockedError(
            f"run directory {run.root} is in use by live process {state.removeprefix('held by ')}; wait for it, "
            "stop it, or choose another --run-id"
        )


def _train_plain(run: Any, cfg: Any, con: Console) -> None:
    """The plain loop in this process, with a progress bar over every stage of every iteration."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from thinking_seeds.pipeline.graph import STAGES
    from thinking_seeds.pipeline.loop import train as train_loop
    from thinking_seeds.pipeline.progress_lines import evaluation_line, prepare_done_line, prepare_start_line, summary

    total = 1 + cfg.iterations * len(STAGES)
    seen: dict[str, float] = {}
    fresh = not run.manifest_path(0, "prepare").exists()
    if fresh:  # a line before the first stage, piped or not: the bar alone says nothing until it ends
        con.print(prepare_start_line(cfg), markup=False, highlight=False)

    def label(k: int, stage: str) -> str:
        return f"iteration {k}/{cfg.iterations - 1} · {stage}" if k >= 0 else "evaluate θ_0"

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=con,
        transient=False,
    ) as progress:
        task = progress.add_task("prepare" if fresh else label(-1, "evaluate"), total=total)

        def on_prepared(m: Any) -> None:
            if fresh:
                progress.console.print(prepare_done_line(m.seconds, cfg), markup=False, highlight=False)
            progress.update(task, description=label(-1, "evaluate"))

        def on_stage(k: int, stage: str, m: Any) -> None:
            seen.update(m.metrics)
            progress.advance(task)
            if stage == "evaluate" and k >= 0:  # the iteration first, then the evaluation of what it trained
                progress.console.print(
                    f"iteration {k}: " + (summary({n: v for n, v in seen.items() if n != "eval/accuracy"}) or "done")
                )
            if stage == "evaluate" and "eval/accuracy" in m.metrics:
                progress.console.print(evaluation_line(k + 1, m.metrics))
            i = STAGES.index(stage) if k >= 0 else len(STAGES) - 1
            nk, ns = (k, STAGES[i + 1]) if i + 1 < len(STAGES) else (k + 1, STAGES[0])
            progress.update(task, description=label(nk, ns) if nk < cfg.iterations else "done")

        try:
            train_loop(run, cfg, on_stage=on_stage, on_prepared=on_prepared)
        except KeyboardInterrupt:
            progress.live.transient = True  # a Ctrl-C ends in one line: the bar goes
            raise


def trainer_node(
    run_id: str = typer.Option(..., "--run-id", "-r", help="The run whose trainer group to join (its config.yaml)."),
    machine_rank: int = typer.Option(
        ..., "--machine-rank", help="This machine's rank in the trainer group: 1 .. update.num_machines - 1."
    ),
    wait: float = typer.Option(600.0, "--wait", min=0.0, help="Seconds to wait for the run's config.yaml to appear."),
) -> None:
    """Join a run's trainer group from another machine (update.num_machines > 1; docs/scaling.md): runs
    `accelerate launch --machine_rank R ...` with the run's saved launch settings until the group stops."""
    if not math.isfinite(wait):  # min=0 lets nan and inf through: a wait that never ends
        raise typer.BadParameter(
            f"{wait} would wait forever; give a finite number of seconds, such as 600", param_hint="'--wait'"
        )
    from thinking_seeds.pipeline.trainer_client import join_trainer_group
    from thinking_seeds.store.run_dir import RunDir

    code = join_trainer_group(RunDir.for_run(run_id), machine_rank, wait)
    if code != 0:
        error_line(f"trainer node {machine_rank} of run {run_id} exited with code {code} (its output is above)")
        raise typer.Exit(code)


def check(run_id: str = typer.Argument(..., help="Run to verify.")) -> None:
    """Verify a whole run directory (every hash, every manifest, the lock); say what is damaged and
    which stage to re-run. Exit code 0: intact, 1: damaged, 2: no such run."""
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.run_dir import RunDir, check_run

    run = RunDir.for_run(run_id)
    if not run.root.is_dir():
        raise DataError(f"no run {run_id!r} under {run.root.parent}; see `ts runs`, or set --runs-dir")
    from thinking_seeds.pipeline.policy_chain import policy_id

    damage, notes = check_run(run, policy_ids=lambda step: policy_id(run, step))
    for line in notes:
        typer.echo(line)
    for line in damage:
        error_line(line, "damaged: ")
    if damage:
        raise typer.Exit(1)  # a verdict, not a usage error: the run is damaged
    typer.echo(f"run {run_id} is intact")
