"""Read-only DuckDB over run directories: the prefix corpus, rollouts, metrics and pool snapshots.

    con = connect("my-run")                 # one run; connect() = every run under runs_root()
    query(con, "SELECT kind, avg(reward) FROM rollouts GROUP BY kind")
    run_named(con, "seeded_solve_rate")     # see NAMED_QUERIES / `ts sql --list`

Views (each exists even when a run has no such data yet, empty with the contract's columns; the
list with one line on each is store/sql_catalog.py, shown by `ts sql --help` and `ts sql --list`):

    prefixes     the prefix corpus (thinking_seeds.store.schemas.PREFIX_FILE_SCHEMA: PREFIX_SCHEMA + the
                 derived prefix_len, prefix_ngram_count, prefix_ngrams; stored since they exist,
                 computed for older files)
    rollouts     verified rollouts (ROLLOUT_SCHEMA), rollouts/iteration=K/rollouts.parquet
    metrics      long format: run_id, iteration, stage, name, value. Stage metrics of iteration k
                 are labelled k; evaluate metrics are labelled with the policy step (θ_{k+1} -> k+1).
    checkpoints  the historical pool's snapshots: run_id, step, created_at, param_count, path
    configs      one row per run: run_id, algorithm, iterations, seed, model_path, created_at, config_json
    corpus_files one row per prefixes/rollouts Parquet file: run_id, view, iteration, rows, bytes
                 (from the footers: row counts without scanning the rows)
    ngram_counts the corpus's character 3-grams by (run, iteration, source age, length bucket)
    prefix_groups prefix counts and length sums by the same keys (both read the seeds stage's
                 per-iteration aggregates where they exist: store/sql_corpus.py)

Read-only, enforced twice, by structure rather than by keywords:

1. By the engine. The Parquet files are opened by pyarrow (one `pyarrow.dataset` per view, with
   the contract schema unified with the files' own, i.e. union by name), registered with DuckDB
   as Arrow scans; manifests and configs are read in Python. Only then is the connection sealed:
   no temp directory (DuckDB otherwise allows file access under it, ./.tmp by default), no allowed
   directories, `enable_external_access=false` (no file system access at all from SQL: COPY ... TO,
   ATTACH, EXPORT, read_text/read_csv of any path, extension installs all fail), capped memory and
   threads, and `lock_configuration=true` (no SET can reopen any of it).
2. By `query()`: every statement is classified by DuckDB's own parser and only plain queries run
   (store/sql_guard.py says which); anything else is refused with a QueryError before anything
   executes, so a script mixing a SELECT with a DROP runs nothing. Every query has a timeout
   (`con.interrupt()`), and Ctrl-C interrupts it.

Files a run cannot be read from (truncated, a column of the wrong type) are left out of the views
with a warning naming the file, so one damaged run never takes `ts runs` or `ts sql` over all runs
down; `ts check RUN` says what to re-run.

`connect(..., views=views_in(sql))` builds only the views a query names (opening every Parquet
footer of a long run's other views is most of a small query's time); `views_in` is conservative:
a query that names none of them but reads from anything (SHOW TABLES, information_schema, ...)
gets them all.

Here: the connection, its sealing and the read-only check; queries run in store/sql_stream.py. The views are built
in store/sql_views.py, the named queries are the catalogue store/sql_queries.py (both re-exported).
This module never imports prefect.
"""

from __future__ import annotations

import signal
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from thinking_seeds.store.compacted_parts import checking
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.run_dir import check_run_id, run_entry, runs_root
from thinking_seeds.store.sql_files import literals
from thinking_seeds.store.sql_guard import QueryError, check_read_only, keywords, parser
from thinking_seeds.store.sql_native import reading_parts
from thinking_seeds.store.sql_queries import NAMED_QUERIES
from thinking_seeds.store.sql_stream import DEFAULT_TIMEOUT_S, QueryResult, QueryStream, query, stream
from thinking_seeds.store.sql_views import VIEWS, list_runs, register_views, view_columns

__all__ = [
    "NAMED_QUERIES",  # re-exported from sql_queries
    "DamagedFileWarning",
    "QueryError",
    "QueryResult",  # re-exported from sql_stream
    "QueryStream",
    "VIEWS",  # re-exported from sql_views
    "check_read_only",
    "connect",
    "list_runs",  # re-exported from sql_views
    "query",  # re-exported from sql_stream
    "run_named",
    "stream",  # re-exported from sql_stream
    "view_columns",  # re-exported from sql_views
    "views_in",
]

MEMORY_LIMIT = "2GB"  # DuckDB's own memory (Arrow scans are read by pyarrow)
THREADS = 2


class DamagedFileWarning(UserWarning):
    """A run file that cannot be read was left out of the views (the message names it)."""


# ---------------------------------------------------------------------------------------------
# connect
# ---------------------------------------------------------------------------------------------


def connect(
    run_id: str | None = None,
    runs_dir: Path | None = None,
    damaged: list[str] | None = None,
    views: Iterable[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory, sealed DuckDB connection with the views of one run (or all runs under runs_dir).

    Raises DataError when `run_id` names no run directory. The connection sees the files that
    exist now; open a new one to see files written later. Unreadable files are left out: one line
    per file is appended to `damaged` when given, else issued as a DamagedFileWarning. `views`:
    only these views (names from VIEWS, e.g. `views_in(sql)`), default all.
    """
    base = Path(runs_dir) if runs_dir is not None else runs_root()
    if run_id is not None:
        try:
            check_run_id(run_id)
        except ValueError as e:
            raise DataError(str(e)) from None
        root = run_entry(base, run_id)  # a link out of the runs folder: refused in one line
        if not root.is_dir():
            known = ", ".join(p.name for p in list_runs(base)) or "none"
            raise DataError(
                f"no run {run_id!r} under {base} (known runs: {known}); set TS_RUNS_DIR or --runs-dir to look elsewhere"
            )
        runs = [root]
    else:
        runs = list_runs(base)

    notes: list[str] = []
    con = duckdb.connect(":memory:")
    try:
        # each iteration folder stat'ed once, whichever views ask; the parts read natively (sql_native.py)
        with _ctrl_c_deferred(), checking(), reading_parts() as parts:
            register_views(con, runs, notes, views)
            _seal(con, parts)
    except BaseException:
        con.close()
        raise
    notes = list(dict.fromkeys(notes))  # a file behind two views (prefixes, corpus_files) is named once
    if damaged is not None:
        damaged.extend(notes)
    else:
        for note in notes:
            warnings.warn(note, DamagedFileWarning, stacklevel=2)
    return con


@contextmanager
def _ctrl_c_deferred() -> Iterator[None]:
    """Hold a Ctrl-C back until the views are registered, then deliver it to the handler in place.

    DuckDB reads a registered Arrow object's schema through Python; a KeyboardInterrupt raised in
    that callback comes back as its own error ("reading the schema ... failed: KeyboardInterrupt"),
    which reads like a damaged file, and leaves the connection half set up. For these few tenths of
    a second the Python handler only notes the signal. (Not a blocked signal mask: in a process with
    other threads -- DuckDB's own -- the kernel hands a process-wide SIGINT to one of them instead.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # Python runs signal handlers in the main thread only
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if got:
            signal.raise_signal(signal.SIGINT)


_READS_SOMETHING = frozenset({"from", "show", "describe", "summarize", "pragma", "table", "pivot", "unpivot"})


def views_in(sql: str) -> set[str]:
    """The views (of VIEWS) a query may read, for `connect(views=...)`. A SELECT is parsed by DuckDB
    itself (json_serialize_sql: no binding, no data) and the views it reads as tables are the
    answer; a column or string that happens to be a view's name does not count (the `runs` query's
    `prefixes` column would otherwise open every prefix file of a 10M-row corpus). Anything else
    (SHOW, DESCRIBE, PIVOT, a query naming no view: the catalogue, a table function) falls back to
    the words: every view whose name occurs as a word, or all of them if it reads from anything;
    none for `SELECT 1`. Errs on the side of more views: a view left out would make a query fail,
    one too many only costs time."""
    parsed = _tables_read(sql)
    named = {v for v in VIEWS if v in parsed}
    if named:
        return named
    try:
        words = {word.strip("\"'`") for word, _ in keywords(sql, comments=True)}
    except duckdb.Error:
        return set(VIEWS)
    named = {v for v in VIEWS if v in words}
    if named:
        return named
    return set(VIEWS) if words & _READS_SOMETHING else set()


def _tables_read(sql: str) -> set[str]:
    """Lower-cased names of the tables a SELECT reads (CTE names included), from DuckDB's parse tree;
    empty when DuckDB cannot serialise the statement (not a SELECT) or it does not parse."""
    import json

    con = parser()
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    except (duckdb.Error, TypeError, ValueError):
        return set()
    finally:
        con.close()
    if tree.get("error"):
        return set()
    out: set[str] = set()
    stack: list = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
                out.add(node["table_name"].lower())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def _seal(con: duckdb.DuckDBPyConnection, parts: list[str] = ()) -> None:
    """From here on no SQL can reach the file system (but the compacted `parts` the views read, by
    their exact paths: store/sql_native.py), hold more than its share of the machine, or loosen these
    settings. The temp directory goes first: DuckDB keeps file access open under it even with
    external access disabled (and defaults it to ./.tmp)."""
    for setting in (
        "temp_directory=''",
        "allowed_directories=[]",
        f"allowed_paths=[{literals(dict.fromkeys(parts))}]",
        f"memory_limit='{MEMORY_LIMIT}'",
        f"threads={THREADS}",
        "python_enable_replacements=false",
        "autoinstall_known_extensions=false",
        "autoload_known_extensions=false",
        "enable_external_access=false",
        "lock_configuration=true",
    ):
        con.execute(f"SET {setting}")


def run_named(con: duckdb.DuckDBPyConnection, name: str, timeout: float | None = DEFAULT_TIMEOUT_S) -> QueryResult:
    if name not in NAMED_QUERIES:
        raise QueryError(f"unknown named query {name!r}; known: {', '.join(NAMED_QUERIES)} (see `ts sql --list`)")
    return query(con, NAMED_QUERIES[name][1], timeout)
