"""The views of `ts sql` over the prefix corpus: prefixes (the files themselves), and the two
views derived from them that the diversity queries read, ngram_counts and prefix_groups.

For each prefix file the derived views read the smallest thing that stands for it:

    ngram_counts    a fresh compacted part (store/compaction.py, `ts compact`: finished blocks of
                    100 iterations), else the seeds stage's aggregates beside the file
                    (store/prefix_aggregates.py), else the 3-grams of the file itself
    prefix_groups   the aggregates, else the file itself

so a live run (never compacted) answers from files ~1/20 of its corpus, and a run written before the
aggregates existed reads as before. Every source gives the same rows up to the order of rows and,
for ngram_counts, how a key's 3-gram is split over rows (count(DISTINCT ngram) and sum(prefixes)
are what to take from it): tests/unit/test_sql_aggregates.py checks every named query on all three.

Prefix files written before the derived columns of PREFIX_FILE_SCHEMA existed (`prefix_len`,
`prefix_ngram_count`, `prefix_ngrams`) get them computed in SQL, so old, new and resumed-by-newer-code
runs read the same.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from thinking_seeds.store.prefix_aggregates import (
    AGGREGATES_NAME,
    AGGREGATES_SCHEMA,
    PREFIX_GROUPS_SCHEMA,
    fresh_aggregates,
    prefix_groups_sql,
)
from thinking_seeds.store.schemas import (
    DERIVED_PREFIX_SQL,
    NGRAM_COUNTS_SCHEMA,
    PREFIX_DERIVED_FIELDS,
    PREFIX_FILE_SCHEMA,
    PREFIX_SCHEMA,
    ngram_counts_sql,
)
from thinking_seeds.store.sql_files import (
    PARQUET_VIEWS,
    dataset,
    file_order,
    fresh_parts,
    quoted,
    readable_files,
)

__all__ = ["CORPUS_VIEWS", "register_corpus_views", "register_prefixes"]

CORPUS_VIEWS = ("ngram_counts", "prefix_groups")  # derived from the prefix files


def register_prefixes(con: duckdb.DuckDBPyConnection, files: list[tuple[Path, pa.Schema]], view: str) -> None:
    """A view named `view` over prefix files (the prefixes view, or an internal one over some of
    them): files that carry the derived columns (PREFIX_DERIVED_FIELDS) are read as they are; files
    written before those columns existed get them computed here, in SQL, from the columns they were
    derived from, so both kinds read the same. Old files first (they hold the earlier iterations of
    a run that was resumed by newer code)."""
    derived = [f.name for f in PREFIX_DERIVED_FIELDS]
    new = [(f, sch) for f, sch in files if all(n in sch.names for n in derived)]
    old = [(f, sch) for f, sch in files if not all(n in sch.names for n in derived)]
    parts = []  # (internal name, dataset)
    if old:
        parts.append((f"_ts_{view}_v1", dataset(old, PREFIX_SCHEMA)))
    if new or not old:  # with no file at all, the view still has the contract's columns
        parts.append((f"_ts_{view}", dataset(new, PREFIX_FILE_SCHEMA)))
    columns = list(PREFIX_FILE_SCHEMA.names)
    for _, ds in parts:
        columns += [n for n in ds.schema.names if n not in columns]
    computed = DERIVED_PREFIX_SQL
    selects = []
    for name, ds in parts:
        con.register(name, ds)
        have = set(ds.schema.names)
        cols = []
        for c in columns:
            if c in have:
                cols.append(quoted(c))
            elif c in computed:
                cols.append(f"{computed[c]} AS {quoted(c)}")
            else:
                cols.append(f"NULL AS {quoted(c)}")
        selects.append(f"SELECT {', '.join(cols)} FROM {name}")
    con.execute(f"CREATE VIEW {view} AS {' UNION ALL '.join(selects)}")


def _aggregates(prefix_files: list[Path]) -> dict[Path, Path]:
    """{prefix file: its fresh aggregates file} for the prefix files that have one. An unreadable
    or stale aggregates file is passed over in silence: the prefix file answers instead."""
    candidates = [f.with_name(AGGREGATES_NAME) for f in prefix_files]
    present = [a for a in candidates if a.is_file()]
    readable = dict(readable_files(present, AGGREGATES_SCHEMA, []))
    out = {}
    for f, a in zip(prefix_files, candidates, strict=True):
        if a in readable and fresh_aggregates(f, readable[a]) is not None:
            out[f] = a
    return out


def register_corpus_views(
    con: duckdb.DuckDBPyConnection, runs: list[Path], damaged: list[str], wanted: set[str]
) -> None:
    """Create the views of CORPUS_VIEWS that are in `wanted` over the prefix files of `runs`, each
    prefix file read through the smallest source that stands for it (module docstring)."""
    wanted = wanted & set(CORPUS_VIEWS)
    if not wanted:
        return
    pattern = PARQUET_VIEWS["prefixes"][0]
    prefix_files = sorted((f for run in runs for f in run.glob(pattern)), key=file_order)
    aggs = _aggregates(prefix_files)
    agg_cols = ", ".join(AGGREGATES_SCHEMA.names)

    def agg_view(name: str, files: list[Path]) -> str:
        con.register(name, dataset([(a, AGGREGATES_SCHEMA) for a in files], AGGREGATES_SCHEMA))
        return f"(SELECT {agg_cols} FROM {name})"

    def raw_view(name: str, files: list[Path]) -> str:
        register_prefixes(con, readable_files(files, PREFIX_FILE_SCHEMA, damaged), name)
        return name

    if "prefix_groups" in wanted:
        cols = ", ".join(PREFIX_GROUPS_SCHEMA.names)
        stored = agg_view("_ts_groups_aggs", [aggs[f] for f in prefix_files if f in aggs])
        raw = raw_view("_ts_groups_src", [f for f in prefix_files if f not in aggs])
        con.execute(
            f"CREATE VIEW prefix_groups AS SELECT {cols} FROM {stored} WHERE ngram IS NULL "
            f"UNION ALL SELECT {cols} FROM ({prefix_groups_sql(raw)})"
        )
    if "ngram_counts" in wanted:
        parts_: list[Path] = []
        rest: set[Path] = set()
        for run in runs:
            p, r = fresh_parts(run, "ngram_counts", pattern)
            parts_ += p
            rest |= set(r)
        uncovered = [f for f in prefix_files if f in rest]
        cols = ", ".join(NGRAM_COUNTS_SCHEMA.names)
        stored_parts = readable_files(parts_, NGRAM_COUNTS_SCHEMA, damaged)
        con.register("_ts_ngram_parts", dataset(stored_parts, NGRAM_COUNTS_SCHEMA))
        stored = agg_view("_ts_ngram_aggs", [aggs[f] for f in uncovered if f in aggs])
        raw = raw_view("_ts_ngram_src", [f for f in uncovered if f not in aggs])
        con.execute(
            f"CREATE VIEW ngram_counts AS SELECT {cols} FROM _ts_ngram_parts "
            f"UNION ALL SELECT {cols} FROM {stored} WHERE ngram IS NOT NULL "
            f"UNION ALL SELECT {cols} FROM ({ngram_counts_sql(raw, dedupe=False)})"
        )
