"""Per-iteration aggregates of the prefix corpus, written by the seeds stage beside its prefix file,
so that `ts sql` answers the diversity queries of a live run (never compacted) from small files.

    runs/<id>/corpus/prefixes/iteration=k/prefixes.parquet     the corpus (the stage's data)
    runs/<id>/corpus/prefixes/iteration=k/aggregates.parquet   this file (AGGREGATES_SCHEMA)

Two kinds of row, keyed by (run, iteration, source age, length bucket = schemas.len_bucket_sql):

- a key's summary (`ngram` null): how many prefixes, the sum of their prefix_len and of their
  prefix_ngram_count. The `prefix_groups` view: counts and mean lengths without scanning a prefix.
- one per distinct 3-gram of the key (`ngram` set): how many of the key's prefixes hold it. The
  `ngram_counts` view (the same rows as a compacted part, store/compaction.py, for one iteration).

On the benchmark corpus that is 3.5M rows for 1M prefixes (16.4M 3-gram codes) in 9.6 MiB, against
198 MiB of prefix files. The file is an output of the seeds stage, hashed by its manifest, so it is
deterministic (one DuckDB thread, rows in ORDER BY ALL order, no time in it): a resumed run writes
it bit for bit. It is derived from the prefix file only, never read by the pipeline, and runs
written before it existed simply lack it (the views then read the prefix file, store/sql_corpus.py).

It stands for its prefix file while that is unchanged: it records the prefix file's size, and is
read only if the prefix file still has that size and is not newer than it (a seeds stage redone
writes both again, prefix file first). Anything else -- a prefix file rewritten by hand, copied
without its times -- makes the views read the prefix file itself: a stale aggregate costs time,
never correctness.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.schemas import len_bucket_sql, ngram_counts_sql

__all__ = [
    "AGGREGATES_NAME",
    "AGGREGATES_SCHEMA",
    "PREFIX_GROUPS_SCHEMA",
    "aggregates_sql",
    "fresh_aggregates",
    "prefix_groups_sql",
    "write_prefix_aggregates",
]

AGGREGATES_NAME = "aggregates.parquet"  # beside prefixes.parquet
_OF_KEY = b"thinking_seeds.aggregates_of"  # metadata: {"prefixes.parquet": size in bytes}

AGGREGATES_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("iteration", pa.int64()),
        pa.field("source_age", pa.int64()),
        pa.field("len_lo", pa.int64()),  # len_bucket_sql(prefix_len)
        pa.field("ngram", pa.int64()),  # schemas.ngram_codes(); null on the key's summary row
        pa.field("prefixes", pa.int64()),  # of the key (summary) / of the key holding the 3-gram
        pa.field("prefix_len_sum", pa.int64()),  # summary rows only
        pa.field("ngram_count_sum", pa.int64()),  # summary rows only: sum of prefix_ngram_count
    ]
)

# The prefix_groups view: the summary rows.
PREFIX_GROUPS_SCHEMA = pa.schema([f for f in AGGREGATES_SCHEMA if f.name != "ngram"])


def prefix_groups_sql(src: str) -> str:
    """SQL of PREFIX_GROUPS_SCHEMA's rows (the summary rows) from `src`, a relation with the
    prefixes view's columns."""
    return (
        f"SELECT run_id, iteration, source_age, {len_bucket_sql('prefix_len')} AS len_lo, count(*) AS prefixes, "
        "CAST(sum(prefix_len) AS BIGINT) AS prefix_len_sum, CAST(sum(prefix_ngram_count) AS BIGINT) AS ngram_count_sum "
        f"FROM {src} GROUP BY run_id, iteration, source_age, len_lo"
    )


def aggregates_sql(src: str) -> str:
    """SQL of AGGREGATES_SCHEMA's rows from `src`, a relation with the prefixes view's columns: the
    summary rows, then each key's distinct 3-grams (the rows of schemas.ngram_counts_sql(dedupe=True))."""
    return (
        "SELECT run_id, iteration, source_age, len_lo, CAST(NULL AS BIGINT) AS ngram, prefixes, prefix_len_sum, "
        f"ngram_count_sum FROM ({prefix_groups_sql(src)}) "
        "UNION ALL SELECT run_id, iteration, source_age, len_lo, ngram, prefixes, NULL, NULL "
        f"FROM ({ngram_counts_sql(src, dedupe=True)})"
    )


def write_prefix_aggregates(prefixes: Path) -> Path:
    """Write the aggregates of the prefix file `prefixes` (as the seeds stage writes it, with the
    derived columns) beside it, atomically; returns their path (for the stage's manifest)."""
    import duckdb  # here: only the seeds stage and the views need it

    prefixes = Path(prefixes)
    cols = ["run_id", "iteration", "source_age", "prefix_len", "prefix_ngram_count", "prefix_ngrams"]
    src = pq.read_table(prefixes, columns=cols)
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET threads = 1")  # deterministic, and one core beside the stage's engine
        con.register("src", src)
        table = con.sql(f"{aggregates_sql('src')} ORDER BY ALL").to_arrow_table()
    finally:
        con.close()
    table = table.cast(AGGREGATES_SCHEMA)
    of = {prefixes.name: prefixes.stat().st_size}
    table = table.replace_schema_metadata({_OF_KEY: json.dumps(of, sort_keys=True).encode()})
    return write_table_atomic(table, prefixes.with_name(AGGREGATES_NAME))


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
