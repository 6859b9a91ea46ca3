"""Compacted parts (store/compaction.py) read by DuckDB's own Parquet reader, not through pyarrow.

Why: a view over a pyarrow dataset of many small files scans several times slower than DuckDB's
read_parquet over the same files. Measured on a live run of 1M prefixes (156 ngram_pairs parts,
439k rows): a distinct count took 0.25-0.44 s through the dataset and 0.04-0.05 s through
read_parquet. The parts are the run's own files, already checked (no link out of the run: compacted_parts.parts;
columns that read as the contract's: sql_files.checked_parts), and written with their kind's schema.

The sealed connection may open exactly these files and nothing else: `reading_parts()` collects
their paths while the views are built, and store/sql.py `_seal` puts them in DuckDB's allowed_paths
before it turns external access off. DuckDB's allowed_paths cannot be made read-only: a statement that
reached the engine unchecked could write these parts (COPY ... TO a part, USE_TMP_FILE false). Every
query is checked first (store/sql_guard.py refuses COPY and any other statement that writes), and only
parts are allowed, never a run's own files (a view's other files are read through pyarrow): what a
caller who bypasses the check (con.execute) could spoil is the cache, not the run; a part it rewrote
with a forged record would be read until its sources change. A path with a
character read_parquet would take for a glob, or a part with a column its contract lacks, is read
through the pyarrow dataset as before.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from thinking_seeds.store.sql_files import dataset, literals, quoted

__all__ = ["reading_parts", "register_parts"]

_GLOB = frozenset("*?[]{}\\")
_ALLOWED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("_ALLOWED", default=None)


@contextlib.contextmanager
def reading_parts() -> Iterator[list[str]]:
    """Within it, `register_parts` reads parts natively; yields the list of the files it opened."""
    paths: list[str] = []
    token = _ALLOWED.set(paths)
    try:
        yield paths
    finally:
        _ALLOWED.reset(token)


def register_parts(
    con: duckdb.DuckDBPyConnection, name: str, parts: list[tuple[Path, pa.Schema]], schema: pa.Schema
) -> None:
    """A relation `name` with `schema`'s columns over the checked parts `parts` ((path, its schema)):
    DuckDB's read_parquet inside `reading_parts()`, else (or for parts it cannot take) a pyarrow dataset."""
    paths = [os.fspath(p) for p, _ in parts]
    allowed = _ALLOWED.get()
    names = set().union(*(set(s.names) for _, s in parts)) if parts else set()
    if allowed is None or any(_GLOB & set(p) for p in paths) or names - set(schema.names):
        con.register(name, dataset(parts, schema))
        return
    types = [str(t) for t in con.from_arrow(schema.empty_table()).types]
    cols = ", ".join(
        f"CAST({quoted(f.name) if f.name in names else 'NULL'} AS {t}) AS {quoted(f.name)}"
        for f, t in zip(schema, types, strict=True)
    )
    if not paths:  # no file: the view still has the schema's columns
        con.execute(f"CREATE VIEW {quoted(name)} AS SELECT {cols} WHERE false")
        return
    # hive_partitioning off: a folder named key=value on the way to the run is not a column
    source = f"read_parquet([{literals(paths)}], union_by_name = true, hive_partitioning = false)"
    con.execute(f"CREATE VIEW {quoted(name)} AS SELECT {cols} FROM {source}")
    allowed.extend(paths)
