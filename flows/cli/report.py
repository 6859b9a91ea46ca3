"""Reading run data: `ts report` (a run's report.md), `ts runs` (the runs folder as a table),
`ts sql` (read-only DuckDB queries over every run) and `ts compact` (fewer files for `ts sql`)."""

from __future__ import annotations

import typer

from thinking_seeds.flows.cli.errors import raise_if_interrupted
from thinking_seeds.flows.cli.output import OutputFormat, cell, console, emit, warn


def report(
    run_id: str = typer.Argument(..., help="Run to report on."),
    no_prefect: bool = typer.Option(False, "--no-prefect", help="Write the report in this process (no Prefect)."),
) -> None:
    """Write runs/RUN_ID/reports/report.md with plots and tables; print its path."""
    from thinking_seeds.flows.cli.evaluate import existing_run

    existing_run(run_id)  # before Prefect starts: a wrong run id is one line, at once
    if no_prefect:
        from thinking_seeds.evals.report import write_report

        path = str(write_report(run_id))
    else:
        from thinking_seeds.flows.cli.prefect_server import start_prefect

        start_prefect()
        from thinking_seeds.flows.report import report_flow

        path = report_flow(run_id)
    typer.echo(path)


def runs(fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format.")) -> None:
    """List the runs: algorithm, iterations done, last evaluation, created."""
    from thinking_seeds.store.run_dir import runs_root
    from thinking_seeds.store.sql import connect, run_named

    damaged: list[str] = []
    con = connect(damaged=damaged)
    warn(damaged)
    try:
        res = run_named(con, "runs")
    finally:
        con.close()
    if fmt is not OutputFormat.table:
        emit(res.columns, res.rows, fmt)
        return
    if not res.rows:
        console().print(f"no runs under {runs_root()}")
        return
    rows = []
    for r in res.to_dicts():
        done = f"{r['iterations_done']}/{r['iterations']}" if r["iterations"] is not None else str(r["iterations_done"])
        acc = "—" if r["last_accuracy"] is None else f"{cell(r['last_accuracy'])} (step {r['last_eval_step']})"
        rows.append((r["run_id"], r["algorithm"], done, acc, r["created_at"]))
    emit(
        ["run id", "algorithm", "iterations done", "last eval accuracy", "created"],
        rows,
        fmt,
        title=f"runs in {runs_root()}",
        numeric={"iterations done", "last eval accuracy"},
    )


def sql(
    text: str | None = typer.Argument(
        None, metavar="QUERY", help="Read-only SQL over the views prefixes, rollouts, metrics, checkpoints, configs."
    ),
    name: str | None = typer.Option(None, "--query", "-q", help="Run a named query (see --list)."),
    run_id: str | None = typer.Option(None, "--run-id", "-r", help="Only this run (default: every run)."),
    list_: bool = typer.Option(False, "--list", "-l", help="List the named queries and the views' columns."),
    show: bool = typer.Option(False, "--show", help="With --query: print the named query's SQL instead of running it."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format."),
    timeout: float = typer.Option(
        60.0, "--timeout", min=0.0, help="Stop the query after this many seconds (0: no limit)."
    ),
) -> None:
    """Query run data with DuckDB (read-only: only plain queries run; Ctrl-C or --timeout stops one)."""
    from thinking_seeds.store.sql import NAMED_QUERIES, QueryError, connect, query, run_named, views_in

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
    # only the views the query reads: opening a long run's other files is most of a small query's time
    views = views_in(NAMED_QUERIES[name][1] if name is not None else text or "")
    con = connect(run_id, damaged=damaged, views=views)
    warn(damaged)
    try:
        raise_if_interrupted()  # a Ctrl-C while the views were set up may have been read as a damaged file
        res = run_named(con, name, timeout or None) if name is not None else query(con, text or "", timeout or None)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("query interrupted (Ctrl-C); nothing was changed") from None
    finally:
        con.close()
    emit(res.columns, res.rows, fmt, title=name)


def compact(run_id: str = typer.Argument(..., help="Run whose files to compact.")) -> None:
    """Copy the finished iterations' small metrics files into a few large parts that `ts sql` reads
    instead (the originals are not touched; safe while the run trains; run it again any time)."""
    from thinking_seeds.store.compaction import COMPACTED
    from thinking_seeds.store.compaction import compact as compact_run
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run(run_id)
    if not run.root.is_dir():
        raise DataError(f"no run {run_id!r} under {run.root.parent}; set TS_RUNS_DIR or --runs-dir to look elsewhere")
    written = compact_run(run.root)
    typer.echo(f"{len(written)} part(s) written under {run.root / COMPACTED}" if written else "up to date")


def _sql_list(fmt: OutputFormat) -> None:
    from thinking_seeds.store.sql import NAMED_QUERIES, view_columns

    emit(["name", "description"], [(n, d) for n, (d, _) in NAMED_QUERIES.items()], fmt, title="named queries")
    if fmt is OutputFormat.table:
        emit(["view", "columns"], [(v, ", ".join(cols)) for v, cols in view_columns().items()], fmt, title="views")
