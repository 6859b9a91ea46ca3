"""Typed rows of the two tables the stages hand each other: the prefix corpus and the rollouts.

A stage builds and edits these dataclasses instead of untyped dicts; the Parquet files keep exactly
the Arrow schemas of `thinking_seeds.store.schemas` (each dataclass lists its schema's fields in the
same order, and tests/unit/test_pipeline_parts.py checks it), so files written before read the same
and a rerun writes the same bytes. A prefix file also carries the derived columns of
PREFIX_FILE_SCHEMA (computed from the row at write time, for SQL); reading takes the dataclass's
columns only, so a file written before those columns existed reads as the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar, TypeVar

import pyarrow as pa

from thinking_seeds.store.parquet_io import read_table, write_table_atomic
from thinking_seeds.store.schemas import (
    PREFIX_FILE_SCHEMA,
    PREFIX_SCHEMA,
    ROLLOUT_OPTIONAL_COLUMNS,
    ROLLOUT_SCHEMA,
    with_derived_prefix_columns,
)


@dataclass
class PrefixRow:
    """One seed: a historical checkpoint's draft, cut at λ (PREFIX_SCHEMA has each field's meaning)."""

    SCHEMA: ClassVar[pa.Schema] = PREFIX_SCHEMA

    run_id: str
    iteration: int
    prompt_id: str
    seed_id: str
    source_step: int
    source_age: int
    prefix_ratio: float
    prefix_token_ids: list[int]
    behaviour_logprobs: list[float]
    prefix_text: str
    draft_len: int
    draft_reward: float | None


@dataclass
class RolloutRow:
    """One sampled response: pending after the continuation stage, scored by verify (ROLLOUT_SCHEMA)."""

    SCHEMA: ClassVar[pa.Schema] = ROLLOUT_SCHEMA

    run_id: str
    iteration: int
    prompt_id: str
    sample_id: int
    kind: str  # on_policy | seeded | offpolicy_full
    source_step: int | None
    prefix_len: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    old_logprobs: list[float]
    behaviour_logprobs: list[float]
    response_text: str
    answer: str | None
    status: str
    reward: float | None
    advantage: float | None
    truncated: bool | None = None  # hit the token budget without ending (reward.overlong)
    policy_version: int | None = None  # the step of the θ that generated its tokens (pipeline.max_staleness)


Row = TypeVar("Row", PrefixRow, RolloutRow)


def _table(cls: type[Row], rows: Sequence[Row]) -> pa.Table:
    names = [f.name for f in fields(cls)]
    return pa.Table.from_pylist([{n: getattr(r, n) for n in names} for r in rows], schema=cls.SCHEMA)


def as_stored(cls: type[Row], rows: Sequence[Row]) -> list[Row]:
    """The rows as read_rows would return them after write_rows (e.g. float32 log-probs), without a file:
    what a stage compares with rows it will read back (pipeline/groups_ahead.py)."""
    return [cls(**d) for d in _table(cls, rows).to_pylist()]


def prefix_table(rows: Sequence[PrefixRow]) -> pa.Table:
    """Prefix rows as their file holds them: PREFIX_FILE_SCHEMA, the derived columns computed."""
    table = with_derived_prefix_columns(_table(PrefixRow, rows))
    return table.select(PREFIX_FILE_SCHEMA.names).cast(PREFIX_FILE_SCHEMA)


def write_rows(cls: type[Row], rows: Sequence[Row], path: Path) -> Path:
    """Write rows as Parquet with their schema, atomically (`cls` gives the schema of an empty table)."""
    if cls is PrefixRow:
        return write_table_atomic(prefix_table(rows), path, schema=PREFIX_FILE_SCHEMA)
    return write_table_atomic(_table(cls, rows), path, schema=cls.SCHEMA)


def read_rows(cls: type[Row], path: Path) -> list[Row]:
    """The rows of a Parquet file written by write_rows (DataError naming the file if it is unusable);
    columns outside the dataclass (a prefix file's derived columns) are not read into it."""
    optional = ROLLOUT_OPTIONAL_COLUMNS if cls is RolloutRow else ()
    table = read_table(path, cls.SCHEMA, optional=optional)
    present = [n for n in cls.SCHEMA.names if n in table.column_names]  # a column added later may be absent
    return [cls(**d) for d in table.select(present).to_pylist()]
