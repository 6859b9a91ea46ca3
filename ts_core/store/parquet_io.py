"""Parquet I/O for stages: atomic writes, reads that fail with actionable errors, content hashes.

Stage contract (docs/algorithm.md §6): a stage writes its outputs atomically, so a crash never leaves a half
file where the next stage (or a cache hit) would read it, and a stage's manifest carries the
content hash of each output.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.store.atomic import atomic_write, shareable  # shareable: re-exported
from thinking_seeds.store.contained import bounded_hash
from thinking_seeds.store.data_error import DataError  # re-exported

__all__ = ["DataError", "content_hash", "read_batches", "read_table", "shareable", "write_table_atomic"]


def _schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _conform(table: pa.Table, schema: pa.Schema, path: Path) -> pa.Table:
    """`table` with exactly `schema`'s columns, in its order and types, or DataError."""
    names = set(table.column_names)
    missing = [n for n in schema.names if n not in names]
    extra = [n for n in table.column_names if n not in set(schema.names)]
    if missing or extra:
        raise DataError(
            f"refusing to write {path}: table does not match the expected schema "
            f"(missing columns: {missing or 'none'}; unexpected columns: {extra or 'none'}). "
            f"Expected: {_schema_text(schema)}"
        )
    columns = []
    for field in schema:
        col = table.column(field.name)
        if not field.nullable and col.null_count:
            raise DataError(
                f"refusing to write {path}: column {field.name!r} has {col.null_count} null "
                f"value(s) but must be set on every row"
            )
        try:
            columns.append(col.cast(field.type) if col.type != field.type else col)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise DataError(
                f"refusing to write {path}: column {field.name!r} has type {col.type}, which "
                f"cannot be converted to the expected {field.type}: {e}"
            ) from e
    return pa.Table.from_arrays(columns, schema=schema)


def write_table_atomic(
    table: pa.Table,
    path: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    key_value: dict[bytes, bytes] | None = None,
) -> Path:
    """Write `table` to `path` as Parquet, atomically; return the path.

    See thinking_seeds.store.atomic: a temp file beside `path`, fsync'ed and renamed over it; any
    failure, KeyboardInterrupt included, leaves whatever was at `path` before untouched.

    With `schema`, the table is first checked and conformed to it: same column names (order is
    fixed to the schema's), types cast where lossless conversion exists, no nulls in
    non-nullable fields; otherwise DataError names the column.

    With `key_value`, that is the footer's key-value metadata, and pyarrow's copy of the Arrow schema
    (ARROW:schema, which would hold the table's schema metadata a second time, base64-encoded) is left
    out: for tables whose types Parquet keeps as they are (no dictionaries, time zones or large types).
    A compacted part's record of its files is tens of KB: without the copy its footer reads ~6x faster,
    and `ts sql` reads ~150 such footers per kind at 1M prefixes (compacted_parts.parts).
    """
    path = Path(path)
    if schema is not None:
        table = _conform(table, schema, path)
    if key_value is None:
        return atomic_write(path, lambda f: pq.write_table(table, f))

    def write(f) -> None:
        with pq.ParquetWriter(f, table.schema, store_schema=False) as w:
            w.write_table(table)
            w.add_key_value_metadata(key_value)

    return atomic_write(path, write)


# The folders of a run directory (thinking_seeds.store.run_dir) that hold Parquet files the project writes.
_RUN_FOLDERS = frozenset({"data", "corpus", "rollouts", "metrics", "evals", "manifests", "reports"})


def _owning_run(path: Path) -> Path | None:
    """The run directory `path` lies in (an ancestor with a config.yaml whose child folder on the
    way is one of the run's own folders), or None for any other file -- a user's input, say."""
    path = Path(os.path.abspath(path))
    for depth, root in enumerate(path.parents):
        if depth > 4:
            break
        rel = path.relative_to(root)
        if len(rel.parts) > 1 and rel.parts[0] in _RUN_FOLDERS and (root / "config.yaml").is_file():
            return root
    return None


def _fix_hint(path: Path, missing: bool) -> str:
    """How to get an unusable file back, by where it lives: a file a run wrote itself can be
    removed and redone by resuming the run; anything else is someone's input and is never ours
    to delete."""
    run = _owning_run(path)
    if run is not None:
        first = "" if missing else "delete it and "
        return (
            f"the file belongs to run {run.name!r}, which writes it itself: {first}re-run the stage that writes "
            f"it (`ts train --run-id {run.name}` with the run's preset and --set values resumes and redoes it; "
            f"`ts check {run.name}` lists all damage)"
        )
    if missing:
        return "check the path (a relative path is taken from the current directory)"
    return (
        "this file is not one thinking-seeds wrote in a run directory, so keep it and write a good copy: "
        "export it again from its source (e.g. pandas DataFrame.to_parquet or pyarrow.parquet.write_table) "
        "and point to that"
    )


def _unreadable(path: Path, e: BaseException) -> DataError:
    """The DataError for a file Arrow could not read: out of memory is said as such (a small file of
    millions of rows can expand past the machine's memory), anything else is a damaged file."""
    if isinstance(e, MemoryError):  # pa.ArrowMemoryError is one too
        return DataError(
            f"out of memory reading Parquet file {path} ({path.stat().st_size:,} bytes on disk): its rows expand "
            "past this machine's memory; read fewer rows (ts eval --prompts N) or split the file"
        )
    return DataError(
        f"cannot read Parquet file {path}: it is truncated or corrupt ({e}); {_fix_hint(path, missing=False)}"
    )


def _check_file(path: Path) -> None:
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "not found"
        raise DataError(f"Parquet file {what}: {path}; {_fix_hint(path, missing=True)}")


def _check_columns(path: Path, names: list[str], schema: pa.Schema | None, optional: Iterable[str]) -> None:
    if schema is not None:
        have = set(names) | set(optional)
        missing = [n for n in schema.names if n not in have]
        if missing:
            raise DataError(
                f"Parquet file {path} lacks column(s) {missing}; found {names}. Expected schema: {_schema_text(schema)}"
            )


def read_table(
    path: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    optional: Iterable[str] = (),
) -> pa.Table:
    """Read a Parquet file, raising DataError that says what to do when it cannot be used.

    - missing file -> names the path; for a file a run writes itself, which stage to redo
    - truncated / corrupt file -> names the path; a run's own file may be deleted and its stage
      redone, any other file (a user's data set) is never called disposable: export it again
    - more rows than memory -> says so (not "corrupt"), and how to read fewer (`read_batches`)
    - with `schema`: every schema column except those in `optional` must be present, or the
      error names the missing ones and the expected schema. Types are not cast on read, so user
      files with compatible layouts (e.g. extra struct fields) still load.
    """
    path = Path(path)
    _check_file(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, MemoryError) as e:
        raise _unreadable(path, e) from e
    _check_columns(path, table.column_names, schema, optional)
    return table


def read_batches(
    path: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    optional: Iterable[str] = (),
    batch_size: int = 1024,
    columns: Iterable[str] | None = None,
) -> tuple[pa.Schema, int, Iterator[pa.RecordBatch]]:
    """(the file's Arrow schema, its row count, its rows in batches of at most `batch_size`: of the
    `columns` the file has, default all), with read_table's checks and errors: for a reader that may
    stop early, so memory follows the rows read, not the file (a 70 KB file can hold 5 million rows).
    Only the footer is read before the first batch is asked for."""
    path = Path(path)
    _check_file(path)
    try:
        file = pq.ParquetFile(path)
    except (pa.ArrowException, OSError, MemoryError) as e:
        raise _unreadable(path, e) from e
    names = file.schema_arrow.names
    _check_columns(path, names, schema, optional)
    read = None if columns is None else [c for c in columns if c in names]

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from file.iter_batches(batch_size=batch_size, columns=read)
        except (pa.ArrowException, OSError, MemoryError) as e:
            raise _unreadable(path, e) from e
        finally:
            file.close()

    return file.schema_arrow, file.metadata.num_rows, batches()


def content_hash(path: str | os.PathLike[str]) -> str:
    """sha256 hex digest of the file's bytes (for stage manifests and cache keys)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"cannot hash {path}: file not found; {_fix_hint(path, missing=True)}")
    return bounded_hash(path, follow=True)  # streamed, bounded, never a FIFO or a device
