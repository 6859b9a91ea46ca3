"""Per-iteration aggregates of the prefix corpus, written by the seeds stage beside its prefix file,
so that `ts sql` answers the diversity queries of a live run (never compacted) from small files.

    runs/<id>/corpus/prefixes/iteration=k/prefixes.parquet     the corpus (the stage's data)
    runs/<id>/corpus/prefixes/iteration=k/aggregates.parquet   this file (AGGREGATES_SCHEMA)

Two kinds of row, keyed by (iteration, source age, length bucket = schemas.len_bucket_sql), each
kind in its own Parquet row group so that a view reads only the one it needs:

- row group 0, a key's summary (`ngram` null): how many prefixes, the sum of their prefix_len and
  of their prefix_ngram_count. The `prefix_groups` view: counts and mean lengths without scanning
  a prefix.
- row group 1 (absent when no prefix has a 3-gram), one row per distinct 3-gram of a key: how many
  of the key's prefixes hold it. The `ngram_counts` view (the rows of a compacted part,
  store/compaction.py, for one iteration).

No run_id column: the prefix rows' run_id is in the file's metadata (`run_id_of`), and the views
add it as a constant; a string per row would be most of what a scan of the file costs.

On the benchmark corpus (bench/corpus.py) that is 3.5M rows for 1M prefixes (16.4M 3-gram codes) in
9.8 MiB, against 185 MiB of prefix files, and 0.05 s of CPU per iteration of 4,096 prefixes.

The file is an output of the seeds stage, hashed by its manifest, so it is deterministic (one
DuckDB thread, rows in ORDER BY ALL order, no time in it): a resumed run writes it bit for bit. It
is derived from the prefix file only, never read by the pipeline, and runs written before it
existed simply lack it (the views then read the prefix file, store/sql_corpus.py).

It stands for its prefix file while that is unchanged: it records the prefix file's size, and is
read only if the prefix file still has that size and is not newer than it (a seeds stage redone
writes both again, prefix file first). Anything else -- a prefix file rewritten by hand, copied
without its times -- makes the views read the prefix file itself: a stale aggregate costs time,
never correctness.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.schemas import PREFIX_SCHEMA, len_bucket_sql, ngram_counts_sql, with_derived_prefix_columns

__all__ = [
    "AGGREGATES_NAME",
    "Aggregates",
    "aggregates_of",
    "write_aggregates",
    "AGGREGATES_SCHEMA",
    "PREFIX_GROUPS_SCHEMA",
    "NGRAM_ROW_GROUP",
    "SUMMARY_ROW_GROUP",
    "fresh_aggregates",
    "prefix_groups_sql",
    "prefix_rows",
    "run_id_of",
    "run_sql",
    "write_prefix_aggregates",
]

AGGREGATES_NAME = "aggregates.parquet"  # beside prefixes.parquet
_OF_KEY = b"thinking_seeds.aggregates_of"  # metadata: {"prefixes.parquet": size in bytes}
_RUN_KEY = b"thinking_seeds.run_id"  # metadata: the prefix rows' run_id (the folder's name if none)

AGGREGATES_SCHEMA = pa.schema(
    [
        pa.field("iteration", pa.int64()),
        pa.field("source_age", pa.int64()),
        pa.field("len_lo", pa.int64()),  # len_bucket_sql(prefix_len)
        pa.field("ngram", pa.int64()),  # schemas.ngram_codes(); null on the key's summary row
        pa.field("prefixes", pa.int64()),  # of the key (summary) / of the key holding the 3-gram
        pa.field("prefix_len_sum", pa.int64()),  # summary rows only
        pa.field("ngram_count_sum", pa.int64()),  # summary rows only: sum of prefix_ngram_count
    ]
)
SUMMARY_ROW_GROUP, NGRAM_ROW_GROUP = 0, 1

# The prefix_groups view: run_id and the summary rows' columns.
PREFIX_GROUPS_SCHEMA = pa.schema(
    [pa.field("run_id", pa.string())] + [f for f in AGGREGATES_SCHEMA if f.name != "ngram"]
)


def prefix_groups_sql(src: str) -> str:
    """SQL of PREFIX_GROUPS_SCHEMA's rows from `src`, a relation with the prefixes view's columns."""
    return (
        f"SELECT run_id, iteration, source_age, {len_bucket_sql('prefix_len')} AS len_lo, count(*) AS prefixes, "
        "CAST(sum(prefix_len) AS BIGINT) AS prefix_len_sum, CAST(sum(prefix_ngram_count) AS BIGINT) AS ngram_count_sum "
        f"FROM {src} GROUP BY run_id, iteration, source_age, len_lo"
    )


def prefix_rows(files: list[Path]) -> pa.Table:
    """The columns of these prefix files that the aggregates are made from, in one table (the derived
    ones computed for a file written before they existed)."""
    tables = []
    for f in files:
        t = pq.read_table(f)
        if "prefix_ngrams" not in t.column_names:  # written before the derived columns existed
            t = with_derived_prefix_columns(t.select(PREFIX_SCHEMA.names).cast(PREFIX_SCHEMA))
        tables.append(
            t.select(["run_id", "iteration", "source_age", "prefix_len", "prefix_ngram_count", "prefix_ngrams"])
        )
    return pa.concat_tables(tables)


def run_sql(src: pa.Table, *queries: str, **tables: pa.Table) -> list[pa.Table]:
    """Each query's rows over the table `src` (named `src` in them, and `tables` by their names), by
    one DuckDB thread: deterministic, and one core beside a run's stages."""
    import duckdb  # here: only the seeds stage, compaction and the views need it

    con = duckdb.connect(":memory:")
    try:
        con.execute("SET threads = 1")
        con.execute("SET enable_progress_bar = false")  # compaction runs behind a live run: no bar on its terminal
        for name, table in {"src": src, **tables}.items():
            con.register(name, table)
        return [con.sql(q).to_arrow_table() for q in queries]
    finally:
        con.close()


@dataclass(frozen=True)
class Aggregates:
    """The two row groups of an aggregates file, computed (`aggregates_of`) but not yet written."""

    summary: pa.Table
    grams: pa.Table
    run_id: str


def aggregates_of(src: pa.Table, run_id: str) -> Aggregates:
    """The aggregates of prefix rows `src` (prefix_rows' columns); `run_id` when `src` has no row."""
    if src.num_rows:
        run_id = src.column("run_id")[0].as_py()
    summary, grams = run_sql(
        src,
        f"SELECT * EXCLUDE (run_id) FROM ({prefix_groups_sql('src')}) ORDER BY ALL",
        f"SELECT * EXCLUDE (run_id) FROM ({ngram_counts_sql('src', dedupe=True)}) ORDER BY ALL",
    )
    nulls = pa.nulls(summary.num_rows, pa.int64())
    summary = summary.append_column("ngram", nulls).select(AGGREGATES_SCHEMA.names)
    n = grams.num_rows
    grams = grams.append_column("prefix_len_sum", pa.nulls(n, pa.int64()))
    grams = grams.append_column("ngram_count_sum", pa.nulls(n, pa.int64()))
    return Aggregates(summary, grams, run_id)


def write_aggregates(prefixes: Path, agg: Aggregates) -> Path:
    """Write `agg`, the aggregates of the prefix file `prefixes` (written already: its size is recorded),
    beside it, atomically; returns their path."""
    prefixes = Path(prefixes)
    of = {prefixes.name: prefixes.stat().st_size}
    meta = {_OF_KEY: json.dumps(of, sort_keys=True).encode(), _RUN_KEY: agg.run_id.encode()}
    schema = AGGREGATES_SCHEMA.with_metadata(meta)
    summary, grams, n = agg.summary, agg.grams, agg.grams.num_rows

    def write(f) -> None:
        with pq.ParquetWriter(f, schema) as w:
            w.write_table(summary.cast(schema), row_group_size=max(1, summary.num_rows))
            if n:
                w.write_table(grams.select(schema.names).cast(schema), row_group_size=n)

    return atomic_write(prefixes.with_name(AGGREGATES_NAME), write)


def write_prefix_aggregates(prefixes: Path) -> Path:
    """Write the aggregates of the prefix file `prefixes` beside it, atomically; returns their path
    (for the seeds stage's manifest). A file written before the derived columns existed works too."""
    prefixes = Path(prefixes)
    return write_aggregates(prefixes, aggregates_of(prefix_rows([prefixes]), prefixes.parents[3].name))


def run_id_of(schema: pa.Schema, agg: Path) -> str:
    """The run_id of the prefix rows an aggregates file was made from (its schema's metadata)."""
    raw = (schema.metadata or {}).get(_RUN_KEY)
    return raw.decode() if raw else Path(agg).parents[3].name


def fresh_aggregates(prefixes: Path, schema: pa.Schema | None = None) -> Path | None:
    """The aggregates file that stands for the prefix file `prefixes`, or None (none, unreadable, or
    stale: the prefix file's size differs from the recorded one, or it is newer). `schema`: the
    aggregates file's Arrow schema when the caller has read it already (its footer)."""
    agg = Path(prefixes).with_name(AGGREGATES_NAME)
    try:
        st_agg = os.stat(agg)
        st_pre = os.stat(prefixes)
        if schema is None:
            schema = pq.read_schema(agg)
        of = json.loads((schema.metadata or {})[_OF_KEY])
    except (OSError, KeyError, ValueError, TypeError, pa.ArrowInvalid):
        return None
    if of.get(Path(prefixes).name) != st_pre.st_size or st_pre.st_mtime_ns > st_agg.st_mtime_ns:
        return None
    return agg
