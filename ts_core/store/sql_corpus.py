"""The views of `ts sql` over the prefix corpus: prefixes (the files themselves), and the views
derived from them that the diversity queries read: ngram_counts and prefix_groups, and the roll-ups
ngram_keys and ngram_per_iteration (store/rollups.py: what prefix_diversity and
prefix_diversity_history read, so their cost follows the run's blocks and iterations, not its rows).

For each prefix file the derived views read the smallest thing that stands for it:

    ngram_counts    a fresh compacted part (store/compaction.py: finished blocks of 100 iterations,
                    written by the run as it goes or by `ts compact`), else the seeds stage's
                    aggregates beside the file (store/prefix_aggregates.py), else the 3-grams of the
                    file itself
    prefix_groups   a fresh compacted part, else the aggregates, else the file itself
    ngram_keys, ngram_per_iteration
                    a fresh compacted part (one per block), else their SQL over the 3-grams that
                    ngram_counts reads for the file (its aggregates, else the file)
    ngram_pairs     the run's compacted parts that chain from block 0 (store/ngram_pairs.py: each
                    pair in the first block that has it), and after the chain ngram_keys' pairs

so a live run (never compacted) answers from files ~1/20 of its corpus, and a run written before the
aggregates existed reads as before. Every source gives the same rows up to the order of rows and,
for ngram_counts, how a key's 3-gram is split over rows (count(DISTINCT ngram) and sum(prefixes)
are what to take from it): tests/unit/test_sql_aggregates.py checks every named query on all three.

Prefix files written before the derived columns of PREFIX_FILE_SCHEMA existed (`prefix_len`,
`prefix_ngram_count`, `prefix_ngrams`) get them computed in SQL, so old, new and resumed-by-newer-code
runs read the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.store.compacted_parts import Part
from thinking_seeds.store.compacted_parts import parts as compacted_parts
from thinking_seeds.store.ngram_pairs import NGRAM_PAIRS_SCHEMA, chained, pairs_sql
from thinking_seeds.store.prefix_aggregates import (
    AGGREGATES_NAME,
    AGGREGATES_SCHEMA,
    NGRAM_ROW_GROUP,
    PREFIX_GROUPS_SCHEMA,
    SUMMARY_ROW_GROUP,
    fresh_aggregates,
    prefix_groups_sql,
    run_id_of,
)
from thinking_seeds.store.rollups import (
    NGRAM_KEYS_SCHEMA,
    NGRAM_PER_ITERATION_SCHEMA,
    ngram_keys_sql,
    ngram_per_iteration_sql,
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
    checked_parts,
    dataset,
    file_order,
    fresh_parts,
    literal,
    quoted,
    readable_files,
)
from thinking_seeds.store.sql_native import register_parts

__all__ = ["CORPUS_VIEWS", "register_corpus_views", "register_prefixes"]

# derived from the prefix files
CORPUS_VIEWS = ("ngram_counts", "prefix_groups", "ngram_keys", "ngram_per_iteration", "ngram_pairs")


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
    selects = []
    for name, ds in parts:
        con.register(name, ds)
        have = set(ds.schema.names)
        # a column the file lacks: computed from the others (a derived one), else null
        cols = [quoted(c) if c in have else f"{DERIVED_PREFIX_SQL.get(c, 'NULL')} AS {quoted(c)}" for c in columns]
        selects.append(f"SELECT {', '.join(cols)} FROM {name}")
    con.execute(f"CREATE VIEW {view} AS {' UNION ALL '.join(selects)}")


@dataclass(frozen=True)
class _Aggregates:
    """A fresh aggregates file (store/prefix_aggregates.py) and its number of row groups."""

    path: Path
    row_groups: int
    run_id: str  # of the prefix rows it was made from


def _aggregates(prefix_files: list[Path]) -> dict[Path, _Aggregates]:
    """{prefix file: its fresh aggregates} for the prefix files that have them. An unreadable or
    stale aggregates file is passed over in silence: the prefix file answers instead."""
    out = {}
    for f in prefix_files:
        a = f.with_name(AGGREGATES_NAME)
        try:
            meta = pq.read_metadata(a)
            schema = meta.schema.to_arrow_schema()
        except (OSError, pa.ArrowInvalid):
            continue
        if schema.names == AGGREGATES_SCHEMA.names and fresh_aggregates(f, schema) is not None:
            out[f] = _Aggregates(a, meta.num_row_groups, run_id_of(schema, a))
    return out


def _row_group_views(
    con: duckdb.DuckDBPyConnection, name: str, aggs: list[_Aggregates], row_group: int, columns: list[str]
) -> str:
    """A relation over one row group of each aggregates file in `aggs`: one dataset per run, its
    run_id a constant (from the files' metadata, not a column read), all runs in one UNION ALL."""
    import pyarrow.dataset as pads  # here: a query that reads no corpus view never waits for it
    import pyarrow.fs as pafs

    fmt, fs = pads.ParquetFileFormat(), pafs.LocalFileSystem()
    by_run: dict[str, list] = {}
    for a in aggs:
        if a.row_groups > row_group:
            frag = fmt.make_fragment(str(a.path), filesystem=fs, row_groups=[row_group])
            by_run.setdefault(a.run_id, []).append(frag)
    cols = ", ".join(quoted(c) for c in columns if c != "run_id")
    selects = []
    for i, (run, frags) in enumerate(sorted(by_run.items())):
        con.register(f"{name}_{i}", pads.FileSystemDataset(frags, AGGREGATES_SCHEMA, fmt, fs))
        selects.append(f"SELECT {literal(run)} AS run_id, {cols} FROM {name}_{i}")
    if not selects:  # no file: the relation still has its columns
        con.register(name, AGGREGATES_SCHEMA.empty_table())
        selects.append(f"SELECT CAST(NULL AS VARCHAR) AS run_id, {cols} FROM {name}")
    return "(" + " UNION ALL ".join(selects) + ")"


# Each view derived from the prefix files: the tag of its internal relations, its schema, the
# aggregates' row group it reads (prefix_aggregates.py) and its SQL over that row group's or the
# prefix rows' relation (`base`: prefix_groups' or ngram_counts' columns).
def _ngram_rows(src: str) -> str:
    return ngram_counts_sql(src, dedupe=False)


_DERIVED = {
    "prefix_groups": ("groups", PREFIX_GROUPS_SCHEMA, SUMMARY_ROW_GROUP, prefix_groups_sql, None),
    "ngram_counts": ("ngram", NGRAM_COUNTS_SCHEMA, NGRAM_ROW_GROUP, _ngram_rows, None),
    "ngram_keys": ("nkeys", NGRAM_KEYS_SCHEMA, NGRAM_ROW_GROUP, _ngram_rows, ngram_keys_sql),
    "ngram_per_iteration": ("niter", NGRAM_PER_ITERATION_SCHEMA, NGRAM_ROW_GROUP, _ngram_rows, ngram_per_iteration_sql),
}


def register_corpus_views(
    con: duckdb.DuckDBPyConnection, runs: list[Path], damaged: list[str], wanted: set[str]
) -> None:
    """Create the views of CORPUS_VIEWS that are in `wanted` over the prefix files of `runs`, each
    prefix file read through the smallest source that stands for it (module docstring)."""
    wanted = wanted & set(CORPUS_VIEWS)
    if not wanted:
        return
    pairs = "ngram_pairs" in wanted
    # ngram_pairs is built from ngram_keys' parts and rows after its chain (_register_pairs)
    wanted = (wanted - {"ngram_pairs"}) | ({"ngram_keys"} if pairs else set())
    pattern = PARQUET_VIEWS["prefixes"][0]
    # each view's fresh compacted parts, and the prefix files none of them stands for
    covered: dict[str, tuple[list[Part], list[Path]]] = {}
    for view in wanted:
        found = [fresh_parts(run, view, pattern) for run in runs]
        covered[view] = ([p for ps, _ in found for p in ps], sorted((f for _, fs in found for f in fs), key=file_order))
    # the aggregates' footers of only the files a part does not stand for (one per file: the cost)
    aggs = _aggregates(sorted({f for _, files in covered.values() for f in files}, key=file_order))

    for view in sorted(wanted):
        tag, schema, row_group, rows_sql, rollup = _DERIVED[view]
        parts_, uncovered = covered[view]
        base = PREFIX_GROUPS_SCHEMA if row_group == SUMMARY_ROW_GROUP else NGRAM_COUNTS_SCHEMA
        register_parts(con, f"_ts_{tag}_parts", checked_parts(parts_, schema, damaged), schema)
        stored = _row_group_views(
            con, f"_ts_{tag}_aggs", [aggs[f] for f in uncovered if f in aggs], row_group, base.names
        )
        raw = [f for f in uncovered if f not in aggs]
        register_prefixes(con, readable_files(raw, PREFIX_FILE_SCHEMA, damaged), f"_ts_{tag}_src")
        sel, base_sel = ", ".join(schema.names), ", ".join(base.names)
        rows = f"(SELECT {base_sel} FROM {stored} UNION ALL SELECT {base_sel} FROM ({rows_sql(f'_ts_{tag}_src')}))"
        files_sql = f"SELECT {sel} FROM {rows}" if rollup is None else rollup(rows)
        parts_sql = f"SELECT {sel} FROM _ts_{tag}_parts"
        con.execute(f"CREATE VIEW {view} AS {parts_sql} UNION ALL SELECT {sel} FROM ({files_sql})")
        if view == "ngram_keys" and pairs:
            _register_pairs(con, runs, parts_, files_sql, damaged)


def _register_pairs(
    con: duckdb.DuckDBPyConnection, runs: list[Path], keys_parts: list[Part], keys_files_sql: str, damaged: list[str]
) -> None:
    """The ngram_pairs view: each run's pair parts that chain from block 0, then the pairs of ngram_keys
    for everything after the chain (its fresh parts of later blocks, and its rows of the files no part
    stands for: `keys_files_sql`)."""
    chain, later = [], []
    for run in runs:
        mine, after = chained(compacted_parts(run, "ngram_pairs"), lambda p, r=run: p.fresh(r))
        chain += mine
        later += [p for p in keys_parts if p.path.parents[2] == run and p.first >= after]
    register_parts(con, "_ts_pairs_parts", checked_parts(chain, NGRAM_PAIRS_SCHEMA, damaged), NGRAM_PAIRS_SCHEMA)
    register_parts(con, "_ts_pairs_keys", checked_parts(later, NGRAM_KEYS_SCHEMA, []), NGRAM_KEYS_SCHEMA)
    keys = ", ".join(NGRAM_KEYS_SCHEMA.names)
    rest = f"(SELECT {keys} FROM _ts_pairs_keys UNION ALL SELECT {keys} FROM ({keys_files_sql}))"
    sel = ", ".join(NGRAM_PAIRS_SCHEMA.names)
    con.execute(f"CREATE VIEW ngram_pairs AS SELECT {sel} FROM _ts_pairs_parts UNION ALL {pairs_sql(rest)}")
