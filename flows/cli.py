"""`ts`: the command line of thinking-seeds.

    ts train --preset tiny --run-id demo [--set prefix.ratio_max=0.5 ...] [--no-prefect]
    ts eval RUN_ID [--step N] [--split validation|test]
    ts report RUN_ID
    ts compare --methods grpo,thinking_seeds --seeds 0,1,2 [--set k=v] [--sweep k=v1,v2] --id NAME [--no-prefect]
    ts runs
    ts sql "SELECT ..." [--run-id ID]  |  ts sql --query NAME [--run-id ID]  |  ts sql --list
    ts config show --preset NAME [--set ...]  |  ts config keys [FILTER]

Heavy imports (Prefect, torch, matplotlib) happen inside the commands that need them, so `ts sql`
and `ts config` start fast. A mistake the user can fix (bad preset or key, missing run or file,
refused query, locked run: ts_core's ConfigError / DataError / CheckpointError / ModelError and any
other ValueError, RunLockedError, DuckDB errors) is printed as one red message, exit code 2, no
traceback; set TS_DEBUG=1 to see the traceback anyway.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import types
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Optional, Union, get_args, get_origin

import click
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

EXIT_USER_ERROR = 2
MAX_TABLE_ROWS = 1000  # a rich table longer than this is unreadable anyway


# ---------------------------------------------------------------------------------------------
# one error handler for every command
# ---------------------------------------------------------------------------------------------


def _is_user_error(e: BaseException) -> bool:
    # ConfigError, DataError, CheckpointError, ModelError, QueryError and pydantic's
    # ValidationError are all ValueErrors. The other classes are checked only if their module is
    # already loaded (it must be, if one of them was raised): no torch import just to catch.
    if isinstance(e, ValueError):
        return True
    run_dir = sys.modules.get("thinking_seeds.store.run_dir")
    if run_dir is not None and isinstance(e, run_dir.RunLockedError):
        return True
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and isinstance(e, duckdb.Error)


def _error_line(text: str, label: str = "error: ", style: str = "red") -> None:
    """One line on stderr: what was wrong, where, how to fix (no traceback)."""
    msg = Text(label, style=f"bold {style}")
    msg.append(" ".join(text.split()) or "error", style=style)
    Console(stderr=True, soft_wrap=True, highlight=False).print(msg)


def _warn(notes: list[str]) -> None:
    for note in notes:
        _error_line(note, "warning: ", "yellow")


class _Group(TyperGroup):
    """The top-level group: every command (and subcommand) runs inside this handler."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # Ctrl-C anywhere in a command: one line, the shell's 130
            if os.environ.get("TS_DEBUG"):
                raise
            _error_line("interrupted (Ctrl-C)")
            raise typer.Exit(130) from None
        except Exception as e:
            if not _is_user_error(e) or os.environ.get("TS_DEBUG"):
                raise
            _error_line(str(e) or type(e).__name__)
            raise typer.Exit(EXIT_USER_ERROR) from None


app = typer.Typer(
    cls=_Group,
    help="thinking-seeds: token-level mix-policy RL (historical checkpoints write the prefix, the current policy continues it).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
config_app = typer.Typer(help="Show a resolved configuration, or every configuration key.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@app.callback()
def _main(
    runs_dir: Optional[Path] = typer.Option(
        None, "--runs-dir", envvar="TS_RUNS_DIR", help="Folder holding the run directories (default ./runs).",
        show_default=False,
    ),
) -> None:
    if runs_dir is not None:
        os.environ["TS_RUNS_DIR"] = str(runs_dir)


# ---------------------------------------------------------------------------------------------
# output helpers
# ---------------------------------------------------------------------------------------------


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


class Split(str, Enum):
    validation = "validation"
    test = "test"


def _console() -> Console:
    """stdout console; when stdout is not a terminal, wide enough that tables do not wrap."""
    c = Console(highlight=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(highlight=False, width=200)
    return c


def _cell(v: Any) -> str:
    from thinking_seeds.evals.report import format_cell

    return format_cell(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _csv_cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(_jsonable(v))
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    return v


def _emit(columns: list[str], rows: list[tuple], fmt: OutputFormat, title: str | None = None,
          numeric: set[str] | None = None) -> None:
    if fmt is OutputFormat.json:
        typer.echo(json.dumps([{c: _jsonable(v) for c, v in zip(columns, r)} for r in rows], indent=2))
        return
    if fmt is OutputFormat.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([_csv_cell(v) for v in r])
        return
    if numeric is None:  # right-align columns whose values are all numbers
        numeric = {c for i, c in enumerate(columns)
                   if rows and all(isinstance(r[i], (int, float, Decimal)) or r[i] is None for r in rows)}
    table = Table(title=title, header_style="bold cyan", show_lines=False)
    for c in columns:
        table.add_column(c, justify="right" if c in numeric else "left", overflow="fold")
    for r in rows[:MAX_TABLE_ROWS]:
        table.add_row(*(Text(_cell(v)) for v in r))  # Text: no rich markup in data
    con = _console()
    con.print(table)
    note = f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    if len(rows) > MAX_TABLE_ROWS:
        note += f", first {MAX_TABLE_ROWS} shown (--format csv or json prints all)"
    con.print(Text(note, style="dim"))


# ---------------------------------------------------------------------------------------------
# train / eval / report
# ---------------------------------------------------------------------------------------------


@app.command()
def train(
    preset: str = typer.Option("tiny", "--preset", "-p", help="Preset name (data/presets/NAME.yaml) or a YAML path."),
    run_id: str = typer.Option(..., "--run-id", "-r", help="Run directory name under the runs folder; reusing one resumes it."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key: section.key=value (repeatable)."),
    no_prefect: bool = typer.Option(False, "--no-prefect", help="Run the plain loop in this process (no Prefect)."),
) -> None:
    """Train (or resume) a run: the stages of every iteration, as a Prefect flow or a plain loop."""
    from thinking_seeds.config import load_config
    from thinking_seeds.store.run_dir import RunDir

    cfg = load_config(preset, set_)  # fail fast on a bad preset / key, before Prefect or torch start
    run = RunDir.for_run(run_id)
    from thinking_seeds.data.sources import check_user_data

    check_user_data(cfg.data)  # a user's data sets: refuse a bad file before anything is written
    con = _console()
    if not no_prefect:
        from thinking_seeds.flows.train import train_flow

        result = train_flow(preset=preset, run_id=run_id, overrides=list(set_) or None)
        con.print(f"[green]run finished:[/] {result}")
        con.print(f"report: ts report {run_id}")
        return
    _train_plain(run, cfg, con)


def _train_plain(run: Any, cfg: Any, con: Console) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from thinking_seeds.pipeline.loop import summary, train as train_loop
    from thinking_seeds.pipeline.stages import STAGES

    total = 1 + cfg.iterations * len(STAGES)
    seen: dict[str, float] = {}

    def label(k: int, stage: str) -> str:
        return f"iteration {k}/{cfg.iterations - 1} · {stage}" if k >= 0 else "evaluate θ_0"

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con, transient=False) as progress:
        task = progress.add_task("prepare · " + label(-1, "evaluate"), total=total)

        def on_stage(k: int, stage: str, m: Any) -> None:
            seen.update(m.metrics)
            progress.advance(task)
            if stage == "evaluate" and "eval/accuracy" in m.metrics:
                progress.console.print(f"step {k + 1}: eval/accuracy {m.metrics['eval/accuracy']:.4f}")
            if stage == "evaluate" and k >= 0:
                progress.console.print(f"iteration {k}: " + (summary({n: v for n, v in seen.items() if n != "eval/accuracy"}) or "done"))
            i = STAGES.index(stage) if k >= 0 else len(STAGES) - 1
            nk, ns = (k, STAGES[i + 1]) if i + 1 < len(STAGES) else (k + 1, STAGES[0])
            progress.update(task, description=label(nk, ns) if nk < cfg.iterations else "done")

        train_loop(run, cfg, on_stage=on_stage)
    con.print(f"[green]run finished:[/] {run.root}")
    con.print(f"report: ts report {run.run_id}")


@app.command("eval")
def eval_(
    run_id: str = typer.Argument(..., help="Run to evaluate."),
    step: Optional[int] = typer.Option(None, "--step", help="Policy step θ_step (default: the latest)."),
    split: Split = typer.Option(Split.validation, "--split", help="Held-out split."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format."),
) -> None:
    """Evaluate a policy of a run on a held-out split (Prefect flow)."""
    _check_eval_target(run_id, step)  # before Prefect starts: a wrong run or step is one line
    from thinking_seeds.store.run_dir import guard_children

    guard_children()  # the temporary Prefect server dies with this process
    from thinking_seeds.flows.evaluate import evaluate_flow

    res = evaluate_flow(run_id=run_id, step=step, split=split.value)
    rows = sorted((k, v) for k, v in (res or {}).items())
    _emit(["metric", "value"], rows, fmt, title=f"{run_id}: {split.value}" + (f" step {step}" if step is not None else ""))


def _check_eval_target(run_id: str, step: Optional[int]) -> None:
    """Refuse a run that does not exist or a policy step it does not have, listing the steps it has."""
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run(run_id)
    if not run.config_path.is_file():
        raise DataError(f"no run {run_id!r} under {run.root.parent} (no config.yaml); see `ts runs`, or set --runs-dir")
    steps = sorted(int(p.name[5:]) for p in run.policy_root.glob("step_*") if p.name[5:].isdigit())
    if step is not None and step not in steps:
        raise DataError(f"run {run_id!r} has no policy step {step} (it has {_ranges(steps) or 'none'}); "
                        f"pass --step with one of them, or leave --step out for the latest")


def _ranges(steps: list[int]) -> str:
    """[0,1,2,5] -> '0-2, 5'."""
    out: list[str] = []
    for x in steps:
        if out and int(out[-1].split("-")[-1]) == x - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{x}"
        else:
            out.append(str(x))
    return ", ".join(out)


@app.command()
def report(
    run_id: str = typer.Argument(..., help="Run to report on."),
    no_prefect: bool = typer.Option(False, "--no-prefect", help="Write the report in this process (no Prefect)."),
) -> None:
    """Write runs/RUN_ID/reports/report.md with plots and tables; print its path."""
    if no_prefect:
        from thinking_seeds.evals.report import write_report

        path = str(write_report(run_id))
    else:
        from thinking_seeds.flows.report import report_flow

        path = report_flow(run_id)
    typer.echo(path)


@app.command()
def export(
    run_id: str = typer.Argument(..., help="Run to export from."),
    out: Path = typer.Option(..., "--out", "-o", help="New folder for the Hugging Face model directory."),
    step: Optional[int] = typer.Option(None, "--step", help="Policy step θ_step (default: the latest)."),
) -> None:
    """Write a policy step as a clean Hugging Face model directory (weights, config, tokenizer, model card)."""
    from thinking_seeds.pipeline.export import export_policy
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run(run_id)
    if not run.config_path.is_file():
        from thinking_seeds.store.parquet_io import DataError

        raise DataError(f"no run {run_id!r} under {run.root.parent} (no config.yaml); see `ts runs`, or set --runs-dir")
    typer.echo(export_policy(run, step, out))


# ---------------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------------

_DEFAULT_METHODS = "grpo,seq_mix,luffy,prefix_context,thinking_seeds"  # thinking_seeds.experiments.compare.DEFAULT_METHODS


@app.command()
def compare(
    preset: str = typer.Option("tiny", "--preset", "-p", help="Preset name (data/presets/NAME.yaml) or a YAML path."),
    methods: str = typer.Option(_DEFAULT_METHODS, "--methods", "-m", help="Comma-separated methods (algorithm presets); a method may name its own seeds, e.g. grpo:0-4,seq_mix:0-2 (else --seeds)."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated seeds; every method runs once per seed."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key for every run: section.key=value (repeatable)."),
    sweep: list[str] = typer.Option([], "--sweep", help="Ablation: section.key=v1,v2 (repeatable; the cartesian product is run)."),
    one_at_a_time: bool = typer.Option(False, "--one-at-a-time", help="Vary one --sweep key at a time from the base config instead of the cartesian product."),
    reference: Optional[str] = typer.Option(None, "--reference", help="Include the unswept runs (same methods and seeds) of comparison ID in the report as the ablation's base point instead of training them again; budgets must match."),
    parallel: int = typer.Option(2, "--parallel", "-j", min=1, help="Runs trained at once (one process and one torch thread each)."),
    out: Path = typer.Option(Path("docs/results"), "--out", "-o", help="The report goes to OUT/ID/report.md (+ PNG, results.parquet)."),
    compare_id: str = typer.Option("compare", "--id", help="Comparison name: run ids are ID-METHOD[-KEY=VAL]-sSEED."),
    no_prefect: bool = typer.Option(False, "--no-prefect", help="Run in this process (no Prefect flow)."),
    no_control: bool = typer.Option(False, "--no-control", help="Skip the equal-compute SFT control."),
    no_final_test: bool = typer.Option(False, "--no-final-test", help="Skip the final evaluation of every run on the whole test split."),
    control_seconds: Optional[float] = typer.Option(None, "--control-seconds", min=0.0,
                                                    help="SFT control budget in seconds (default: the mean RL run's training time)."),
    control_corpus: Optional[int] = typer.Option(None, "--control-corpus", min=1,
                                                 help="Worked solutions generated for the SFT control (default 50000)."),
    report_only: bool = typer.Option(False, "--report-only", help="Train nothing: write the report of the runs that "
                                     "exist now (a comparison still running or stopped half-way)."),
) -> None:
    """Compare methods over seeds on one budget (resumable), add the SFT control, write the report."""
    import shlex

    from thinking_seeds.experiments.compare import CompareError, parse_list, parse_sweep, plan

    method_list = parse_list(methods, "--methods")
    seed_list = parse_list(seeds, "--seeds")
    if not all(s.lstrip("-").isdigit() for s in seed_list):
        raise typer.BadParameter(f"--seeds must be integers, got {seeds!r}")
    seed_ints = [int(s) for s in seed_list]
    sweep_d = parse_sweep(sweep) or None
    specs = plan(preset, method_list, seed_ints, list(set_), sweep_d, compare_id, one_at_a_time)  # fail fast, before any run
    if reference:
        from thinking_seeds.experiments.compare import reference_members
        from thinking_seeds.store.run_dir import runs_root

        reference_members(reference, specs, runs_root())
    argv = ["ts"] + (["--runs-dir", os.environ["TS_RUNS_DIR"]] if os.environ.get("TS_RUNS_DIR") else [])
    argv += ["compare", "--preset", preset, "--methods", ",".join(method_list), "--seeds", ",".join(seed_list)]
    argv += [x for s in set_ for x in ("--set", s)] + [x for s in sweep for x in ("--sweep", s)]
    argv += (["--one-at-a-time"] if one_at_a_time else []) + (["--reference", reference] if reference else [])
    argv += ["--parallel", str(parallel), "--out", str(out), "--id", compare_id]
    argv += (["--no-prefect"] if no_prefect else []) + (["--no-control"] if no_control else [])
    argv += ["--no-final-test"] if no_final_test else []
    argv += (["--control-seconds", repr(control_seconds)] if control_seconds is not None else [])
    argv += (["--control-corpus", str(control_corpus)] if control_corpus is not None else [])
    command = " ".join(shlex.quote(a) for a in argv)
    con = _console()
    if report_only:
        from thinking_seeds.experiments.compare import report_dir
        from thinking_seeds.experiments.compare_report import write_compare_report
        from thinking_seeds.store.run_dir import runs_root

        path = write_compare_report(compare_id, runs_root(), report_dir(out, compare_id), command=command,
                                    reference=reference)
        con.print(f"[green]report (runs so far):[/] {path}")
        return
    con.print(f"comparison [bold]{compare_id}[/]: {len(specs)} runs ({', '.join(method_list)} x seeds {seeds}"
              + (f" x sweep {', '.join(sweep)}" + (" one at a time" if one_at_a_time else "") if sweep else "")
              + (f", base point from {reference}" if reference else "") + f"), {parallel} at once")
    kwargs = dict(preset=preset, methods=method_list, seeds=seed_ints, overrides=list(set_) or None, sweep=sweep_d,
                  compare_id=compare_id, parallel=parallel, out_dir=str(out), control=not no_control,
                  control_seconds=control_seconds, command=command, control_corpus_size=control_corpus,
                  one_at_a_time=one_at_a_time, reference=reference, final_test=not no_final_test)
    try:
        if no_prefect:
            from thinking_seeds.experiments.compare import run_comparison

            path = run_comparison(**kwargs, console=Console(stderr=True))
        else:
            from thinking_seeds.flows.compare import compare_flow

            path = compare_flow(**kwargs)
    except CompareError as e:
        if os.environ.get("TS_DEBUG"):
            raise
        msg = Text("error: ", style="bold red")
        msg.append(str(e), style="red")
        Console(stderr=True, soft_wrap=True, highlight=False).print(msg)
        raise typer.Exit(1) from None
    con.print(f"[green]report:[/] {path}")


# ---------------------------------------------------------------------------------------------
# runs / sql
# ---------------------------------------------------------------------------------------------


@app.command()
def runs(fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format.")) -> None:
    """List the runs: algorithm, iterations done, last evaluation, created."""
    from thinking_seeds.store.run_dir import runs_root
    from thinking_seeds.store.sql import connect, run_named

    damaged: list[str] = []
    con = connect(damaged=damaged)
    _warn(damaged)
    try:
        res = run_named(con, "runs")
    finally:
        con.close()
    if fmt is not OutputFormat.table:
        _emit(res.columns, res.rows, fmt)
        return
    if not res.rows:
        _console().print(f"no runs under {runs_root()}")
        return
    rows = []
    for r in res.to_dicts():
        done = f"{r['iterations_done']}/{r['iterations']}" if r["iterations"] is not None else str(r["iterations_done"])
        acc = "—" if r["last_accuracy"] is None else f"{_cell(r['last_accuracy'])} (step {r['last_eval_step']})"
        rows.append((r["run_id"], r["algorithm"], done, acc, r["created_at"]))
    _emit(["run id", "algorithm", "iterations done", "last eval accuracy", "created"], rows, fmt,
          title=f"runs in {runs_root()}", numeric={"iterations done", "last eval accuracy"})


@app.command()
def sql(
    text: Optional[str] = typer.Argument(None, metavar="QUERY", help="Read-only SQL over the views prefixes, rollouts, metrics, checkpoints, configs."),
    name: Optional[str] = typer.Option(None, "--query", "-q", help="Run a named query (see --list)."),
    run_id: Optional[str] = typer.Option(None, "--run-id", "-r", help="Only this run (default: every run)."),
    list_: bool = typer.Option(False, "--list", "-l", help="List the named queries and the views' columns."),
    show: bool = typer.Option(False, "--show", help="With --query: print the named query's SQL instead of running it."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format."),
    timeout: float = typer.Option(60.0, "--timeout", min=0.0, help="Stop the query after this many seconds (0: no limit)."),
) -> None:
    """Query run data with DuckDB (read-only: only plain queries run; Ctrl-C or --timeout stops one)."""
    from thinking_seeds.store.sql import NAMED_QUERIES, QueryError, connect, query, run_named

    given = [x for x in (text is not None, name is not None, list_) if x]
    if len(given) != 1:
        raise typer.BadParameter("give exactly one of: a QUERY, --query NAME, or --list")
    if list_:
        _sql_list(fmt)
        return
    if name is not None and name not in NAMED_QUERIES:
        raise QueryError(f"unknown named query {name!r}; known: {', '.join(NAMED_QUERIES)} (see `ts sql --list`)")
    if show:
        if name is None:
            raise typer.BadParameter("--show needs --query NAME")
        typer.echo(NAMED_QUERIES[name][1].strip())
        return
    damaged: list[str] = []
    con = connect(run_id, damaged=damaged)
    _warn(damaged)
    try:
        res = run_named(con, name, timeout or None) if name is not None else query(con, text or "", timeout or None)
    except KeyboardInterrupt:
        _error_line("query interrupted (Ctrl-C); nothing was changed")
        raise typer.Exit(130) from None
    finally:
        con.close()
    _emit(res.columns, res.rows, fmt, title=name)


@app.command()
def check(run_id: str = typer.Argument(..., help="Run to verify.")) -> None:
    """Verify a whole run directory (every hash, every manifest, the lock); say what is damaged and
    which stage to re-run. Exit code 0: intact, 1: damaged, 2: no such run."""
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.run_dir import RunDir, check_run

    run = RunDir.for_run(run_id)
    if not run.root.is_dir():
        raise DataError(f"no run {run_id!r} under {run.root.parent}; see `ts runs`, or set --runs-dir")
    damage, notes = check_run(run)
    for line in notes:
        typer.echo(line)
    for line in damage:
        _error_line(line, "damaged: ")
    if damage:
        raise typer.Exit(1)
    typer.echo(f"run {run_id} is intact")


def _sql_list(fmt: OutputFormat) -> None:
    from thinking_seeds.store.sql import NAMED_QUERIES, view_columns

    _emit(["name", "description"], [(n, d) for n, (d, _) in NAMED_QUERIES.items()], fmt, title="named queries")
    if fmt is OutputFormat.table:
        _emit(["view", "columns"], [(v, ", ".join(cols)) for v, cols in view_columns().items()], fmt, title="views")


# ---------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------


@config_app.command("show")
def config_show(
    preset: str = typer.Option("tiny", "--preset", "-p", help="Preset name or YAML path."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key: section.key=value (repeatable)."),
) -> None:
    """Print the resolved configuration as YAML (loadable again as a preset path)."""
    import yaml

    from thinking_seeds.config import load_config

    cfg = load_config(preset, set_)
    text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    con = _console()
    if con.is_terminal:
        from rich.syntax import Syntax

        con.print(Syntax(text, "yaml", background_color="default"))
    else:
        typer.echo(text, nl=False)


def _type_name(ann: Any) -> str:
    origin = get_origin(ann)
    if origin is Literal:
        return "choice"
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(ann))
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in get_args(ann))}]"
    if ann is type(None):
        return "None"
    return getattr(ann, "__name__", str(ann))


def _allowed(field: Any) -> str:
    ann = field.annotation
    choices = [a for a in get_args(ann) if get_origin(a) is Literal] + ([ann] if get_origin(ann) is Literal else [])
    parts = [" | ".join(str(x) for x in get_args(c)) for c in choices]
    for meta in field.metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                parts.append(f"{sym} {getattr(meta, attr)}")
    return ", ".join(parts)


def _default_text(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, tuple):
        return "[" + ", ".join(_default_text(x) for x in v) + "]"
    return str(v)


def config_key_rows() -> list[tuple[str, str, str, str, str]]:
    """(dotted key, type, default, allowed, help) for every leaf field of RunConfig."""
    from pydantic import BaseModel

    from thinking_seeds.config import RunConfig

    rows: list[tuple[str, str, str, str, str]] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, f"{prefix}{name}.")
                continue
            rows.append((prefix + name, _type_name(ann), _default_text(field.default), _allowed(field), field.description or ""))

    walk(RunConfig, "")
    return rows


@config_app.command("keys")
def config_keys(
    filter_: Optional[str] = typer.Argument(None, metavar="[FILTER]", help="Only keys containing this text."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format."),
) -> None:
    """Every configuration key (usable with --set) with its type, default, allowed values and help."""
    rows = [r for r in config_key_rows() if not filter_ or filter_.lower() in r[0].lower()]
    _emit(["key", "type", "default", "allowed", "help"], rows, fmt, title="configuration keys", numeric=set())


def main() -> None:  # pragma: no cover - `python -m flows.cli`
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
