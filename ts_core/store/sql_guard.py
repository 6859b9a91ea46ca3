"""The second seal of `ts sql` (store/sql.py): only plain queries run. Every statement is classified by
DuckDB's own parser (`extract_statements`, `tokenize`): SELECT (which covers FROM-first, VALUES,
DESCRIBE, SHOW, SUMMARIZE, static PIVOT), a dynamic PIVOT / UNPIVOT statement (which DuckDB plans as
several statements), and EXPLAIN of one of those. Anything else -- including a CREATE or COPY wrapped
around a dynamic PIVOT -- is refused with a QueryError before anything executes. Needs no views: the
CLI checks a query on a bare connection before it opens any run."""

from __future__ import annotations

import threading
from typing import Any

import duckdb

__all__ = ["QueryError", "check_read_only", "keywords", "parser"]

_PARSER: list[duckdb.DuckDBPyConnection] = []  # one empty in-memory database per process, made when first asked
_PARSER_LOCK = threading.Lock()


class QueryError(ValueError):
    """A query was refused (it could change something) or failed; the message says why."""


_ALLOWED = "SELECT, FROM ..., VALUES, WITH ... SELECT, DESCRIBE, SHOW, SUMMARIZE, PIVOT, UNPIVOT, EXPLAIN of a query"


def parser() -> duckdb.DuckDBPyConnection:
    """A connection that holds nothing, to parse and classify SQL on; the caller closes it. A cursor of
    one empty database made once per process: a new database costs ~15 ms, and a `ts sql` start parses
    its query twice (this check, and which views it reads)."""
    with _PARSER_LOCK:
        if not _PARSER:
            _PARSER.append(duckdb.connect(":memory:"))
        return _PARSER[0].cursor()


def _kind(stmt: Any) -> str:
    return str(stmt.type).rsplit(".", 1)[-1].upper()


def keywords(sql: str, comments: bool = False) -> list[tuple[str, int]]:
    """(lower-cased word, end offset) of each token of `sql`, by DuckDB's tokenizer (duckdb.Error if it
    cannot); comments dropped unless `comments`."""
    tokens = duckdb.tokenize(sql)
    out = []
    for i, (start, kind) in enumerate(tokens):
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        if comments or kind != duckdb.token_type.comment:
            out.append((sql[start:end].strip().lower(), end))
    return out


def _is_query(con: duckdb.DuckDBPyConnection, stmt: Any) -> bool:
    """Whether one parsed statement only reads: a SELECT; a dynamic PIVOT/UNPIVOT, which DuckDB plans
    as several statements (MULTI) -- accepted only when the statement itself *is* the PIVOT, not a
    CREATE or COPY around one; or EXPLAIN (not ANALYZE of anything else) of one of these."""
    kind = _kind(stmt)
    if kind == "SELECT":
        return True
    words = keywords(stmt.query or "")
    if kind == "MULTI":
        return bool(words) and words[0][0] in ("pivot", "unpivot", "pivot_wider", "pivot_longer")
    if kind == "EXPLAIN" and words and words[0][0] == "explain":
        skip = 2 if len(words) > 1 and words[1][0] == "analyze" else 1
        rest = (stmt.query or "")[words[skip - 1][1] :]
        try:
            inner = con.extract_statements(rest)
        except duckdb.Error:
            return False
        return len(inner) == 1 and _is_query(con, inner[0])
    return False


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> list[Any]:
    """Parse `sql` and return its statements if every one only reads; else raise QueryError."""
    if not sql or not sql.strip():
        raise QueryError("empty query")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(f"cannot parse the query: {' '.join(str(e).split())}") from None
    if not statements:
        raise QueryError("empty query")
    for st in statements:
        if not _is_query(con, st):
            snippet = " ".join((st.query or "").split())[:80]
            raise QueryError(
                f"refused {_kind(st)} statement ({snippet!r}): queries over run data are read-only; allowed: {_ALLOWED}"
            )
    return statements
