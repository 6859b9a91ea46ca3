"""The view rollout_groups (store/rollups.py): the verified rollouts counted per (run, iteration,
kind, source step and age, length bucket), what seeded_solve_rate sums up. Each block of finished
iterations is read from its fresh compacted part (store/compaction.py), every rollouts file no part
stands for from the file itself, so the query's cost follows a run's iterations, not its samples (20M
on a 10M-prefix run). The rows are those of rollouts; only how they are summed differs.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from thinking_seeds.store.rollups import ROLLOUT_GROUPS_SCHEMA, rollout_groups_sql
from thinking_seeds.store.schemas import ROLLOUT_SCHEMA
from thinking_seeds.store.sql_files import (
    PARQUET_VIEWS,
    checked_parts,
    dataset,
    file_order,
    fresh_parts,
    readable_files,
)
from thinking_seeds.store.sql_native import register_parts

__all__ = ["register_rollout_groups"]


def register_rollout_groups(con: duckdb.DuckDBPyConnection, runs: list[Path], damaged: list[str]) -> None:
    pattern = PARQUET_VIEWS["rollouts"][0]
    found = [fresh_parts(run, "rollout_groups", pattern) for run in runs]
    parts = [p for ps, _ in found for p in ps]
    files = sorted((f for _, fs in found for f in fs), key=file_order)
    schema = ROLLOUT_GROUPS_SCHEMA
    register_parts(con, "_ts_rgroups_parts", checked_parts(parts, schema, damaged), schema)
    con.register("_ts_rgroups_src", dataset(readable_files(files, ROLLOUT_SCHEMA, damaged), ROLLOUT_SCHEMA))
    sel = ", ".join(ROLLOUT_GROUPS_SCHEMA.names)
    con.execute(
        f"CREATE VIEW rollout_groups AS SELECT {sel} FROM _ts_rgroups_parts "
        f"UNION ALL SELECT {sel} FROM ({rollout_groups_sql('_ts_rgroups_src')})"
    )
