"""The views `ts sql` offers, one line each: the one list that `ts sql --help`, `ts sql --list`,
`sql.connect(views=...)` and the README show (tests/unit/test_sql_listing.py checks the README's).

No imports beyond the standard library: the CLI reads it to build its --help text, and `ts --help`
must not wait for DuckDB or pyarrow. The columns of each view are in store/sql_views.py
(`view_columns`), the named queries over them in store/sql_queries.py.
"""

from __future__ import annotations

__all__ = ["VIEWS", "VIEW_HELP", "views_sentence"]

VIEW_HELP: dict[str, str] = {
    "prefixes": "the prefix corpus, one row per seed (the drafts' cut prefixes)",
    "rollouts": "verified rollouts, one row per sampled response",
    "metrics": "every stage's metrics, long format (run_id, iteration, stage, name, value)",
    "checkpoints": "the historical pool's snapshots",
    "configs": "one row per run: algorithm, iterations, seed, model, its whole config as JSON",
    "corpus_files": "one row per prefixes/rollouts Parquet file, with its rows (from the footers)",
    "ngram_counts": "the corpus's character 3-grams by (run, iteration, source age, length bucket)",
    "prefix_groups": "prefix counts and length sums by (run, iteration, source age, length bucket)",
    "ngram_keys": "the corpus's distinct 3-grams by (run, source age, length bucket), once per block or file",
    "ngram_per_iteration": "the number of distinct 3-grams of each (run, iteration)",
    "rollout_groups": "rollouts counted by (run, iteration, kind, source step and age, length bucket)",
    "ngram_pairs": "the corpus's (source age, 3-gram) and (length bucket, 3-gram) pairs per run, each at least once",
}

VIEWS: tuple[str, ...] = tuple(VIEW_HELP)


def views_sentence() -> str:
    """'prefixes, rollouts, ... and prefix_groups': the views in one line of help text."""
    return ", ".join(VIEWS[:-1]) + " and " + VIEWS[-1]
