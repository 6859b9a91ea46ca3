"""Running a checked query on a `ts sql` connection (store/sql.py): in a worker thread, so a timeout or
Ctrl-C can stop it, and in batches, so a result is never whole in Python.

With `doubles_as_text` (what `ts sql -f csv` asks for) the DOUBLE columns of a query's result come back
as DuckDB's text for them, which is Python's repr of the same float (checked on 400k values, NaN, inf,
-0.0 and subnormals included: tests/unit/test_sql_stream.py): formatting the floats is most of the
time Python's csv module takes on a long result (62,520 rows of `clip_fraction`: 0.30 s of csv.writer
against 0.11 s with the doubles as text), and DuckDB formats them in its own threads.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb

from thinking_seeds.store.sql_files import quoted
from thinking_seeds.store.sql_guard import QueryError, check_read_only

__all__ = ["DEFAULT_TIMEOUT_S", "FETCH_ROWS", "QueryResult", "QueryStream", "query", "stream"]

DEFAULT_TIMEOUT_S = 60.0


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)


FETCH_ROWS = 10_000  # rows per batch a stream hands over (the worker holds at most two batches ahead)


@dataclass
class QueryStream:
    """The columns of a query's last statement and an iterator over its rows, in batches; fetched from
    DuckDB as they are read, so a result is never whole in Python (`close()` stops the query)."""

    columns: list[str]
    types: list[str]  # DuckDB's name of each column's type (DOUBLE read as text: VARCHAR)
    batches: Iterator[list[tuple]]
    close: Any


def stream(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    batch_rows: int | None = None,
    doubles_as_text: bool = False,
) -> QueryStream:
    """Run read-only SQL (all statements checked before any runs) and stream the last one's rows.

    The statements and every fetch run in a worker thread while this one waits, so a timeout or Ctrl-C
    can stop them with `con.interrupt()` (DuckDB holds no Python signal handler while it computes): a
    query that never ends comes back as a QueryError after `timeout` seconds from the start (None: no
    limit), and KeyboardInterrupt is re-raised once the engine has stopped. The worker fetches
    `batch_rows` (FETCH_ROWS) at a time and waits for the reader: memory holds two batches, not the result.
    `doubles_as_text`: the last statement's DOUBLE columns as their text (the module's docstring)."""
    statements = check_read_only(con, sql)
    batch_rows = batch_rows or FETCH_ROWS
    handover: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()
    # An Event, not Thread.join: a join cut short by KeyboardInterrupt can report a running thread
    # as finished, and closing the connection under it then fails ("connection is busy").
    done = threading.Event()

    def put(item: tuple) -> bool:
        while not stop.is_set():
            try:
                handover.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            cur = None
            for i, st in enumerate(statements):
                last = i == len(statements) - 1
                cur = con.execute((last and doubles_as_text and _doubles_as_text(con, st)) or st)
            assert cur is not None
            described = cur.description or []
            if not put(("columns", ([d[0] for d in described], [str(d[1]) for d in described]))):
                return
            while cur.description and not stop.is_set():
                rows = cur.fetchmany(batch_rows)
                if not rows or not put(("rows", rows)):
                    break
            put(("end", None))
        except BaseException as e:  # handed to the reader's thread
            put(("error", e))
        finally:
            done.set()

    deadline = None if not timeout else time.monotonic() + timeout

    def close() -> None:
        if not done.is_set():
            stop.set()
            con.interrupt()
            done.wait(10)

    def take() -> tuple:
        try:
            while True:
                try:
                    return handover.get(timeout=0.05)
                except queue.Empty:
                    if deadline is not None and time.monotonic() > deadline:
                        close()
                        raise QueryError(
                            f"query timed out after {timeout:g} s and was stopped; narrow it (WHERE, LIMIT) "
                            f"or allow more time with --timeout SECONDS"
                        ) from None
        except KeyboardInterrupt:
            close()
            raise

    def unwrap(item: tuple) -> Any:
        kind, value = item
        if kind == "error":
            done.wait(10)
            if isinstance(value, duckdb.Error):
                raise QueryError(f"{type(value).__name__}: {' '.join(str(value).split())}") from None
            raise value
        return value

    threading.Thread(target=work, daemon=True, name="ts-sql").start()
    columns, types = unwrap(take())

    def batches() -> Iterator[list[tuple]]:
        try:
            while True:
                item = take()
                if item[0] == "end":
                    return
                yield unwrap(item)
        finally:
            close()

    return QueryStream(columns, types, batches(), close)


def query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    max_rows: int | None = None,
) -> QueryResult:
    """Run read-only SQL (one or more statements, all checked before any runs); the last one's rows --
    at most `max_rows` of them (None: all), fetched no further (see `stream`)."""
    res = stream(con, sql, timeout)
    rows: list[tuple] = []
    try:
        for batch in res.batches:
            rows.extend(batch)
            if max_rows is not None and len(rows) >= max_rows:
                del rows[max_rows:]
                break
    finally:
        res.close()
    return QueryResult(res.columns, rows)


def _doubles_as_text(con: duckdb.DuckDBPyConnection, statement: Any) -> str | None:
    """The SELECT `statement` with its DOUBLE columns cast to text, in its columns' order and under their
    names; None when it has none, is not a SELECT, or DuckDB cannot bind it so (the statement then runs
    as it is and says itself what is wrong)."""
    text = statement.query or ""
    if str(statement.type).rsplit(".", 1)[-1].upper() != "SELECT":
        return None
    try:
        rel = con.sql(text)  # a SELECT is only bound here, not run
        if rel is None or "DOUBLE" not in (types := [str(t) for t in rel.types]):
            return None
        cols = ", ".join(
            (f"CAST(#{i} AS VARCHAR)" if t == "DOUBLE" else f"#{i}") + f" AS {quoted(c)}"
            for i, (c, t) in enumerate(zip(rel.columns, types, strict=True), start=1)
        )
    except duckdb.Error:
        return None
    # the newline ends a trailing -- comment; a projection keeps the rows' order (ORDER BY inside)
    return f"SELECT {cols} FROM (\n{text}\n) AS _ts_rows"
