"""Roll-ups of the corpus that the named queries read instead of its rows (issue 53): each is what a
query would compute first from every row, stored per block of iterations by store/compaction.py and
computed from the files where no part stands for them (store/sql_corpus.py, store/sql_rollouts.py), so
a query's cost follows a run's iterations (or blocks), not its rows.

    ngram_keys           (run, source age, length bucket, 3-gram): each distinct 3-gram of a key once
                         per block (no iteration: a block of 100 iterations shares most of them), what
                         prefix_diversity counts distinct over the whole run
    ngram_per_iteration  (run, iteration): the distinct 3-grams of the iteration's prefixes, what
                         prefix_diversity_history reads. An iteration's prefixes are one file, so
                         any source of it (a part, its aggregates, the file) counts all of them.
    rollout_groups       (run, iteration, kind, source step and age, length bucket): samples, solved
                         and summed reward of the verified rollouts (reward not null), what
                         seeded_solve_rate sums up

Plain text and schemas only (no pyarrow dataset, no DuckDB connection): the SQL runs over a relation
named by the caller.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from thinking_seeds.store.schemas import len_bucket_sql, ngram_counts_sql

__all__ = [
    "NGRAM_KEYS_SCHEMA",
    "NGRAM_PER_ITERATION_SCHEMA",
    "ROLLOUT_GROUPS_SCHEMA",
    "from_prefixes",
    "ngram_keys_sql",
    "ngram_per_iteration_sql",
    "rollout_groups_sql",
]

NGRAM_KEYS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("source_age", pa.int64()),
        pa.field("len_lo", pa.int64()),  # schemas.len_bucket_sql(prefix_len)
        pa.field("ngram", pa.int64()),  # schemas.ngram_codes()
    ]
)

NGRAM_PER_ITERATION_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("iteration", pa.int64()),
        pa.field("distinct_ngrams", pa.int64()),
    ]
)

ROLLOUT_GROUPS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("iteration", pa.int64()),
        pa.field("kind", pa.string()),
        pa.field("source_step", pa.int64()),
        pa.field("source_age", pa.int64()),  # iteration - source_step; null without a source step (or < 0)
        pa.field("len_lo", pa.int64()),  # schemas.len_bucket_sql(prefix_len)
        pa.field("samples", pa.int64()),
        pa.field("solved", pa.float64()),  # samples with status 'ok'
        pa.field("reward", pa.float64()),  # their rewards' sum
    ]
)


def ngram_keys_sql(ngram_rows: str) -> str:
    """NGRAM_KEYS_SCHEMA's rows from `ngram_rows`, a relation with the ngram_counts view's columns."""
    return f"SELECT DISTINCT run_id, source_age, len_lo, ngram FROM {ngram_rows}"


def ngram_per_iteration_sql(ngram_rows: str) -> str:
    """NGRAM_PER_ITERATION_SCHEMA's rows from `ngram_rows` (the ngram_counts view's columns)."""
    return (
        f"SELECT run_id, iteration, CAST(count(DISTINCT ngram) AS BIGINT) AS distinct_ngrams "
        f"FROM {ngram_rows} GROUP BY run_id, iteration"
    )


def from_prefixes(rollup_sql: Callable[[str], str]) -> Callable[[str], str]:
    """A roll-up's SQL over a relation with the prefixes view's columns (for compaction)."""
    return lambda src: rollup_sql(f"({ngram_counts_sql(src, dedupe=False)})")


def rollout_groups_sql(src: str) -> str:
    """ROLLOUT_GROUPS_SCHEMA's rows from `src`, a relation with the rollouts view's columns."""
    return (
        "SELECT run_id, iteration, kind, source_step, "
        "CASE WHEN source_step IS NULL OR source_step < 0 THEN NULL ELSE iteration - source_step END AS source_age, "
        f"{len_bucket_sql('prefix_len')} AS len_lo, count(*) AS samples, "
        "sum(CAST(status = 'ok' AS DOUBLE)) AS solved, sum(CAST(reward AS DOUBLE)) AS reward "
        f"FROM {src} WHERE reward IS NOT NULL GROUP BY ALL"
    )
