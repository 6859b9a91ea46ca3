"""The views that `thinking_seeds.store.sql.connect` registers (the list and one line on each:
store/sql_catalog.py; their columns: `view_columns`), built from a run's files.

The Parquet files are opened by pyarrow (one `pyarrow.dataset` per view, with the contract schema
unified with the files' own, i.e. union by name) and registered with DuckDB as Arrow scans;
manifests and configs are read in Python. Nothing here lets SQL open a file: `sql.connect` seals
the connection after `register_views`. Files a run cannot be read from (truncated, a column of the
wrong type) are left out, with one line per file for the caller to report. Only the views asked for
are built (`register_views(..., views=)`): listing and opening every file of a view is most of the
cost of starting a query over a long run.

Where each kind of view is built:

    store/sql_files.py    which files a Parquet view reads (compacted parts first), their checks
    store/sql_corpus.py   prefixes and the views derived from it (ngram_counts, prefix_groups,
                          ngram_keys, ngram_per_iteration, ngram_pairs), read from the seeds stage's
                          per-iteration aggregates where they exist
    store/sql_rollouts.py rollout_groups (rollouts counted per iteration and key: store/rollups.py)
    store/sql_tables.py   checkpoints, configs, corpus_files (tables built in Python)

The metrics view reads a compacted part (store/compaction.py, `ts compact`) instead of the files it
copies while they are unchanged, and every other file as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb

from thinking_seeds.store.contained import link_out
from thinking_seeds.store.ngram_pairs import NGRAM_PAIRS_SCHEMA
from thinking_seeds.store.prefix_aggregates import PREFIX_GROUPS_SCHEMA
from thinking_seeds.store.rollups import NGRAM_KEYS_SCHEMA, NGRAM_PER_ITERATION_SCHEMA, ROLLOUT_GROUPS_SCHEMA
from thinking_seeds.store.run_dir import runs_root
from thinking_seeds.store.schemas import NGRAM_COUNTS_SCHEMA, PREFIX_FILE_SCHEMA
from thinking_seeds.store.sql_catalog import VIEWS
from thinking_seeds.store.sql_corpus import register_corpus_views, register_prefixes
from thinking_seeds.store.sql_files import (
    PARQUET_VIEWS,
    checked_parts,
    dataset,
    file_order,
    readable_files,
    view_files,
)
from thinking_seeds.store.sql_native import register_parts
from thinking_seeds.store.sql_rollouts import register_rollout_groups
from thinking_seeds.store.sql_tables import (
    CHECKPOINTS_SCHEMA,
    CONFIGS_SCHEMA,
    CORPUS_FILES_SCHEMA,
    checkpoints,
    configs,
    corpus_files,
)

__all__ = ["VIEWS", "list_runs", "register_views", "view_columns"]  # VIEWS: re-exported from sql_catalog

_RUN_MARKERS = ("config.yaml", "corpus", "rollouts", "metrics", "checkpoints")


def list_runs(runs_dir: Path | None = None) -> list[Path]:
    """Run directories under `runs_dir` (default runs_root()): folders holding any run data."""
    base = Path(runs_dir) if runs_dir is not None else runs_root()
    if not base.is_dir():
        return []
    # a link to a folder outside `base` is not a run of it (store/run_dir.py run_entry): left out, never read
    return sorted(
        p
        for p in base.iterdir()
        if p.is_dir() and link_out(base, p.name) is None and any((p / m).exists() for m in _RUN_MARKERS)
    )


def register_views(
    con: duckdb.DuckDBPyConnection, runs: list[Path], damaged: list[str], views: Iterable[str] | None = None
) -> None:
    """Create the views `views` (default: all of VIEWS) over the run directories `runs` on `con`; a
    file that cannot be read is left out and one line naming it is appended to `damaged`.

    A view's files are listed and checked only when the view is asked for: on a long run most of
    `ts sql`'s start is opening every Parquet file's footer (BENCHMARKS.md, "SQL over the prefix corpus")."""
    wanted = set(VIEWS if views is None else views)
    unknown = wanted - set(VIEWS)
    if unknown:
        raise ValueError(f"unknown view(s) {sorted(unknown)}; known: {', '.join(VIEWS)}")
    for view, (pattern, contract) in PARQUET_VIEWS.items():
        if view not in wanted:
            continue
        found = [view_files(run, view, pattern) for run in runs]
        parts_ = checked_parts([p for ps, _ in found for p in ps], contract, damaged)
        files = sorted((f for _, fs in found for f in fs), key=file_order)
        if view == "prefixes":
            register_prefixes(con, readable_files(files, PREFIX_FILE_SCHEMA, damaged), "prefixes")
            continue
        # the parts by DuckDB's own reader (store/sql_native.py), then the files no part stands for
        register_parts(con, f"_ts_{view}_parts", parts_, contract)
        con.register(f"_ts_{view}", dataset(readable_files(files, contract, damaged), contract))
        con.execute(f"CREATE VIEW {view} AS SELECT * FROM _ts_{view}_parts UNION ALL BY NAME SELECT * FROM _ts_{view}")
    register_corpus_views(con, runs, damaged, wanted)
    if "rollout_groups" in wanted:
        register_rollout_groups(con, runs, damaged)
    tables = {
        "checkpoints": checkpoints,
        "configs": lambda r: configs(r, damaged),
        "corpus_files": lambda r: corpus_files(r, damaged),
    }
    for view, build in tables.items():
        if view in wanted:
            con.register(f"_ts_{view}", build(runs))
            con.execute(f"CREATE VIEW {view} AS SELECT * FROM _ts_{view}")


def view_columns() -> dict[str, list[str]]:
    """{view: [column, ...]} of the public views, as `connect()` creates them (files may add columns)."""
    schemas = {view: schema for view, (_, schema) in PARQUET_VIEWS.items()} | {
        "prefixes": PREFIX_FILE_SCHEMA,
        "checkpoints": CHECKPOINTS_SCHEMA,
        "configs": CONFIGS_SCHEMA,
        "corpus_files": CORPUS_FILES_SCHEMA,
        "ngram_counts": NGRAM_COUNTS_SCHEMA,
        "prefix_groups": PREFIX_GROUPS_SCHEMA,
        "ngram_keys": NGRAM_KEYS_SCHEMA,
        "ngram_per_iteration": NGRAM_PER_ITERATION_SCHEMA,
        "ngram_pairs": NGRAM_PAIRS_SCHEMA,
        "rollout_groups": ROLLOUT_GROUPS_SCHEMA,
    }
    return {v: list(schemas[v].names) for v in VIEWS}  # in the catalogue's order
