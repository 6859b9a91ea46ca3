"""store/sql_native.py: compacted parts are read by DuckDB's read_parquet, and the sealed connection
may open exactly those files: nothing else of the run or of the machine, and no glob."""

from __future__ import annotations

import duckdb
import pytest

from tests.unit.test_sql_aggregates import ITERATIONS, _answers, _run
from thinking_seeds.store import compaction
from thinking_seeds.store.compaction import compact
from thinking_seeds.store.sql import QueryError, connect, query


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(compaction, "BLOCK", 3)


def _allowed(con) -> str:
    return query(con, "SELECT value FROM duckdb_settings() WHERE name = 'allowed_paths'").rows[0][0]


def test_the_views_read_the_parts_natively_and_nothing_else(tmp_path):
    run = _run(tmp_path, "a", set(range(ITERATIONS)))
    written = compact(run.root)
    con = connect("a", tmp_path, views=["prefix_groups", "metrics"])
    try:
        allowed = _allowed(con)
        plan = " ".join(r[-1] for r in query(con, "EXPLAIN SELECT count(*) FROM prefix_groups").rows)
        assert "READ_PARQUET" in plan.upper()  # DuckDB's reader, not an Arrow scan
        opened = {p for p in written if str(p) in allowed}
        kinds = {p.parent.name for p in opened}
        assert kinds == {"prefix_groups", "metrics"}, kinds  # the views asked for, no other kind
        part = next(p for p in opened if p.parent.name == "metrics")
        assert query(con, f"SELECT count(*) > 0 FROM read_parquet('{part}')").rows == [(True,)]
        for other in (
            run.prefixes(0),  # a file of the run no view reads through DuckDB
            next(p for p in written if p.parent.name == "ngram_keys"),  # a part of a kind not asked for
            part.parent / "*.parquet",  # a glob over allowed files
        ):
            with pytest.raises((QueryError, duckdb.Error), match="(?i)permission|disabled|access"):
                query(con, f"SELECT count(*) FROM read_parquet('{other}')")
    finally:
        con.close()


def test_a_path_read_parquet_would_take_for_a_glob_is_read_through_arrow(tmp_path):
    base = tmp_path / "runs[1]"
    _run(base, "a", set(range(ITERATIONS)))
    want = _answers(base, "a")
    compact(base / "a")
    con = connect("a", base, views=["prefix_groups", "metrics"])
    try:
        assert _allowed(con) in ("[]", "")
    finally:
        con.close()
    assert _answers(base, "a") == want
