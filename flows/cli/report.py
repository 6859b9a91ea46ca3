"""Reading run data: `ts report` (a run's report.md), `ts runs` (the runs folder as a table),
`ts sql` (read-only DuckDB queries over every run) and `ts compact` (fewer files for `ts sql`)."""

from __future__ import annotations

import typer

from thinking_seeds.flows.cli.output import OutputFormat, cell, console, emit, error_line, warn
from thinking_seeds.pipeline.ctrl_c import raise_if_interrupted
from thinking_seeds.store.sql_catalog import VIEWS, views_sentence


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
    from thinking_seeds.flows.cli.sql_output import escape_controls

    # a run's config.yaml is anyone's text: no control character reaches the terminal (json escapes its own)
    res.rows = [tuple(escape_controls(v) if isinstance(v, str) else v for v in r) for r in res.rows]
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
        None, metavar="QUERY", help=f"Read-only SQL over the views {views_sentence()} (see --list)."
    ),
    name: str | None = typer.Option(None, "--query", "-q", help="Run a named query (see --list)."),
    run_id: str | None = typer.Option(
        None, "--run-id", "-r", help="Only this run (default: every run; a note on stderr names them)."
    ),
    list_: bool = typer.Option(False, "--list", "-l", help="List the named queries and the views' columns."),
    show: bool = typer.Option(False, "--show", help="With --query: print the named query's SQL instead of running it."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format."),
    timeout: float = typer.Option(
        60.0, "--timeout", min=0.0, help="Stop the query after this many seconds (0: no limit)."
    ),
    max_rows: int = typer.Option(
        1_000_000, "--max-rows", min=0, help="With csv or json: stop, in one line, past this many rows (0: no limit)."
    ),
    max_bytes: int = typer.Option(
        1 << 30, "--max-bytes", min=0, help="With csv or json: stop, in one line, past this many bytes (0: no limit)."
    ),
) -> None:
    """Query run data with DuckDB (read-only: only plain queries run; Ctrl-C or --timeout stops one).
    Only what is printed is fetched: a table's rows shown; csv and json as they are written."""
    from thinking_seeds.store.sql import NAMED_QUERIES, QueryError, connect, views_in

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
    sql_text = NAMED_QUERIES[name][1] if name is not None else text or ""
    _check_query(sql_text)  # a refused query is its one line: no run is opened, no note printed
    damaged: list[str] = []
    # only the views the query reads: opening a long run's other files is most of a small query's time
    con = connect(run_id, damaged=damaged, views=views_in(sql_text))
    warn(damaged)
    if run_id is None and name is None:
        _note_all_runs()
    try:
        raise_if_interrupted()  # a Ctrl-C while the views were set up may have been read as a damaged file
        _print_query(con, sql_text, timeout or None, fmt, name, max_rows or None, max_bytes or None)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("query interrupted (Ctrl-C); nothing was changed") from None
    finally:
        con.close()


def _check_query(sql_text: str) -> None:
    """Refuse anything but a plain query, on a connection that holds nothing (store/sql_guard.py)."""
    from thinking_seeds.store.sql_guard import check_read_only, parser

    bare = parser()
    try:
        check_read_only(bare, sql_text)
    finally:
        bare.close()


def _print_query(con, sql_text, timeout, fmt, title, max_rows, max_bytes) -> None:
    """Fetch only what is printed: a table's rows (one more, to say there are more); csv and json streamed."""
    from thinking_seeds.flows.cli.output import MAX_TABLE_ROWS
    from thinking_seeds.flows.cli.sql_output import print_stream, print_table
    from thinking_seeds.store.sql import query, stream

    if fmt is OutputFormat.table:
        res = query(con, sql_text, timeout, max_rows=MAX_TABLE_ROWS + 1)
        print_table(res.columns, res.rows, len(res.rows) > MAX_TABLE_ROWS, title)
        return
    res = stream(con, sql_text, timeout, doubles_as_text=fmt is OutputFormat.csv)  # floats formatted by DuckDB
    try:
        print_stream(res.columns, res.batches, fmt, max_rows, max_bytes, res.types)
    finally:
        res.close()


def compact(run_id: str = typer.Argument(..., help="Run whose files to compact.")) -> None:
    """Copy finished blocks of 100 iterations (small metrics files, the corpus's 3-gram counts) into
    a few large parts that `ts sql` reads instead (the originals are not touched; safe while the run
    trains; run it again any time)."""
    from thinking_seeds.store.compaction import BLOCK, COMPACTED, finished_blocks, last_started
    from thinking_seeds.store.compaction import compact as compact_run
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run(run_id)
    if not run.root.is_dir():
        raise DataError(f"no run {run_id!r} under {run.root.parent}; set TS_RUNS_DIR or --runs-dir to look elsewhere")
    written = compact_run(run.root)
    head = f"{len(written)} part(s) written under {run.root / COMPACTED}" if written else "up to date"
    typer.echo(f"{head}: {_blocks_line(BLOCK, finished_blocks(run.root), last_started(run.root))}")


def _blocks_line(block: int, blocks: list[int], started: int) -> str:
    """What `ts compact` covers: it works on finished blocks of `block` iterations only."""
    end = blocks[-1] + block - 1 if blocks else -1  # last iteration of the last finished block
    done = (
        f"{len(blocks)} finished block(s) of {block} iterations compacted (0-{end})"
        if blocks
        else f"ts compact works on finished blocks of {block} iterations and this run has none yet"
    )
    if started <= end:
        return done
    return f"{done}; iterations {end + 1}-{started} are read as they are until iteration {end + 1 + block} starts"


def _note_all_runs() -> None:
    """Free SQL without --run-id reads every run at once: say which, on stderr (stdout stays data)."""
    from thinking_seeds.store.run_dir import runs_root
    from thinking_seeds.store.sql import list_runs

    names = [p.name for p in list_runs()]
    if len(names) > 1:
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        error_line(
            f"no --run-id: the views hold all {len(names)} runs under {runs_root()} ({shown}); "
            "group by run_id, or add --run-id ID for one",
            "note: ",
            "cyan",
        )


def _sql_list(fmt: OutputFormat) -> None:
    from thinking_seeds.store.sql import NAMED_QUERIES, view_columns
    from thinking_seeds.store.sql_catalog import VIEW_HELP

    emit(["name", "description"], [(n, d) for n, (d, _) in NAMED_QUERIES.items()], fmt, title="named queries")
    if fmt is OutputFormat.table:
        cols = view_columns()
        rows = [(v, VIEW_HELP[v], ", ".join(cols[v])) for v in VIEWS]
        emit(["view", "what it holds", "columns"], rows, fmt, title="views")
