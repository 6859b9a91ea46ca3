"""The seeds stage's two files, made ready beside the update and written by the stage.

The seeds stage writes iteration k's prefix file and its aggregates (store/prefix_aggregates.py: what
`ts sql` reads on a live run). Computing them -- the prefix file's derived 3-gram columns and the
aggregates' DuckDB queries, ~15-30 ms an iteration on the tiny preset, 1-2% of it -- is the part of
seeding that stayed on the loop's critical path once the drafts moved beside the update
(pipeline/seeds_ahead.py). `prepare` computes both tables where the drafts are sampled ahead, on the
core the update leaves free; `write` then only writes them, in the stage, after update k-1, as before:
nothing is written ahead. The bytes are those of the direct path (`write` without a prepared pair:
the prefix file written, read back, aggregated), which a resumed run takes (tests/unit/test_seed_files.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from thinking_seeds.pipeline.rows import PrefixRow, prefix_table, write_rows
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.prefix_aggregates import Aggregates, aggregates_of, write_aggregates, write_prefix_aggregates
from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA

if TYPE_CHECKING:
    from collections.abc import Sequence

AGGREGATED = ["run_id", "iteration", "source_age", "prefix_len", "prefix_ngram_count", "prefix_ngrams"]


@dataclass(frozen=True)
class Prepared:
    """The prefix file's table (PREFIX_FILE_SCHEMA) and its aggregates, not written yet."""

    table: pa.Table
    aggregates: Aggregates


def prepare(rows: Sequence[PrefixRow], run_id: str) -> Prepared:
    """Both files' contents for these rows (`run_id`: the aggregates' when there is no row)."""
    table = prefix_table(rows)
    return Prepared(table, aggregates_of(table.select(AGGREGATED), run_id))


def write(rows: Sequence[PrefixRow], path: Path, prepared: Prepared | None = None) -> tuple[Path, Path]:
    """Write the prefix file at `path` and its aggregates beside it; (prefix file, aggregates file)."""
    if prepared is None:
        written = write_rows(PrefixRow, rows, path)
        return written, write_prefix_aggregates(written)
    written = write_table_atomic(prepared.table, path, schema=PREFIX_FILE_SCHEMA)
    return written, write_aggregates(written, prepared.aggregates)
