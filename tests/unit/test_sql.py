"""thinking_seeds.store.sql: views over a hand-made run, the named queries' numbers, and read-only enforcement."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.synthetic_run import (
    EVAL,
    ITERATIONS,
    POPS,
    clipfrac,
    entropy,
    make_run,
    rollout_rows,
    snapshot_files,
)
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.schemas import PREFIX_SCHEMA, ROLLOUT_SCHEMA
from thinking_seeds.store.sql import NAMED_QUERIES, QueryError, connect, query, run_named, view_columns


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    make_run(base, "syn")
    make_run(base, "syn2", algorithm="grpo")
    # a fresh run: prepare wrote its config, nothing else yet
    fresh = base / "fresh"
    fresh.mkdir()
    (fresh / "config.yaml").write_text((base / "syn" / "config.yaml").read_text())
    return base


@pytest.fixture()
def con(runs):
    c = connect("syn", runs)
    yield c
    c.close()


def _by(res, **where):
    return [r for r in res.to_dicts() if all(r[k] == v for k, v in where.items())]


def _one(res, **where):
    rows = _by(res, **where)
    assert len(rows) == 1, (where, rows)
    return rows[0]


# ---------------------------------------------------------------------------------------------
# views
# ---------------------------------------------------------------------------------------------


def test_views_count_rows_of_one_run(con):
    assert query(con, "SELECT count(*) FROM prefixes").rows == [(6,)]
    # generated.parquet sits next to rollouts.parquet and must not be read
    assert query(con, "SELECT count(*) FROM rollouts").rows == [(15,)]
    assert query(con, "SELECT count(*), count(DISTINCT run_id) FROM metrics").rows[0][1] == 1
    ck = query(con, "SELECT run_id, step, param_count, created_at FROM checkpoints ORDER BY step")
    assert [(r[0], r[1], r[2]) for r in ck.rows] == [("syn", 0, 1234), ("syn", 1, 1234)]
    assert ck.rows[1][3].year == 2026 and ck.rows[1][3].day == 2
    assert query(con, "SELECT algorithm, iterations FROM configs").rows == [("thinking_seeds", ITERATIONS)]
    assert query(con, "SELECT prefix_len FROM prefixes ORDER BY prefix_len").column("prefix_len") == [0, 2, 3, 4, 4, 5]


def test_all_runs_and_fresh_run(runs):
    c = connect(None, runs)
    assert query(c, "SELECT count(DISTINCT run_id) FROM rollouts").rows == [(2,)]
    assert sorted(query(c, "SELECT run_id FROM configs").column("run_id")) == ["fresh", "syn", "syn2"]
    c.close()
    c = connect("fresh", runs)
    for name in NAMED_QUERIES:
        res = run_named(c, name)
        assert len(res) == (1 if name == "runs" else 0), name
    # the views exist with the contract's columns even with no file behind them
    cols = {v: [r[0] for r in query(c, f"DESCRIBE {v}").rows] for v in view_columns()}
    assert cols == view_columns()
    assert cols["prefixes"][: len(PREFIX_SCHEMA)] == PREFIX_SCHEMA.names
    c.close()


def test_empty_runs_dir_and_missing_run(tmp_path):
    c = connect(None, tmp_path / "nothing-here")
    assert query(c, "SELECT count(*) FROM rollouts").rows == [(0,)]
    c.close()
    with pytest.raises(DataError, match="no run 'nope'"):
        connect("nope", tmp_path)


def test_union_by_name(tmp_path):
    """A file missing a nullable column reads it as null; a file's extra column is kept."""
    rows = rollout_rows("u")
    t = pa.Table.from_pylist(rows[:2], schema=ROLLOUT_SCHEMA).drop(["advantage"])
    extra = pa.Table.from_pylist(rows[2:4], schema=ROLLOUT_SCHEMA).append_column("note", pa.array(["x", "y"]))
    for k, table in ((0, t), (1, extra)):
        p = tmp_path / "u" / "rollouts" / f"iteration={k}" / "rollouts.parquet"
        p.parent.mkdir(parents=True)
        pq.write_table(table, p)
    c = connect("u", tmp_path)
    res = query(c, "SELECT sample_id, advantage, note FROM rollouts ORDER BY sample_id")
    assert res.rows == [(0, None, None), (1, None, None), (2, 0.0, "x"), (3, 0.0, "y")]
    c.close()


# ---------------------------------------------------------------------------------------------
# named queries on hand-computed numbers
# ---------------------------------------------------------------------------------------------


def test_prefix_diversity(con):
    res = run_named(con, "prefix_diversity")
    # source age 1: "aaaa" (aaa, aaa), "abcd" (abc, bcd), "abcab" (abc, bca, cab), "" (none)
    r = _one(res, breakdown="source_age", bucket="1")
    assert (r["prefixes"], r["ngrams"], r["distinct_ngrams"]) == (4, 7, 5)
    assert r["distinct_ratio"] == pytest.approx(5 / 7)
    assert r["mean_prefix_len"] == pytest.approx((4 + 4 + 5 + 0) / 4)
    # source age 2: "xyz" (xyz), "ab" (too short)
    r = _one(res, breakdown="source_age", bucket="2")
    assert (r["prefixes"], r["ngrams"], r["distinct_ngrams"], r["distinct_ratio"]) == (2, 1, 1, 1.0)
    # length buckets (tokens): 0 | 2-3 | 4-7
    r = _one(res, breakdown="prefix_len", bucket="0")
    assert (r["prefixes"], r["ngrams"], r["distinct_ngrams"], r["distinct_ratio"]) == (1, 0, 0, None)
    r = _one(res, breakdown="prefix_len", bucket="2-3")
    assert (r["prefixes"], r["ngrams"], r["distinct_ngrams"]) == (2, 1, 1)
    r = _one(res, breakdown="prefix_len", bucket="4-7")
    assert (r["prefixes"], r["ngrams"], r["distinct_ngrams"]) == (3, 7, 5)
    r = _one(res, breakdown="all")
    assert (r["prefixes"], r["ngrams"], r["distinct_ngrams"]) == (6, 8, 6)
    assert [r["breakdown"] for r in res.to_dicts()] == ["source_age"] * 2 + ["prefix_len"] * 3 + ["all"]


def test_seeded_solve_rate(con):
    res = run_named(con, "seeded_solve_rate")
    # on-policy solve rate: iteration 1 = 1/4, iteration 2 = 2/4
    r = _one(res, kind="on_policy", breakdown="all")
    assert (r["samples"], r["solve_rate"], r["vs_on_policy"]) == (8, 3 / 8, 0.0)
    r = _one(res, kind="seeded", breakdown="all")
    assert r["samples"] == 6
    assert r["solve_rate"] == pytest.approx(3 / 6)
    assert r["mean_reward"] == pytest.approx(3.5 / 6)
    # baseline weighted like the seeded samples: 2 in iteration 1 (0.25), 4 in iteration 2 (0.5)
    assert r["on_policy_solve_rate"] == pytest.approx((2 * 0.25 + 4 * 0.5) / 6)
    assert r["vs_on_policy"] == pytest.approx(0.5 - 2.5 / 6)
    r = _one(res, kind="seeded", breakdown="source_step", bucket="0")
    assert (r["samples"], r["solve_rate"], r["mean_reward"], r["on_policy_solve_rate"]) == (4, 0.5, 0.625, 0.375)
    r = _one(res, kind="seeded", breakdown="source_age", bucket="2")
    assert (r["samples"], r["solve_rate"], r["mean_reward"], r["vs_on_policy"]) == (2, 0.5, 0.75, 0.0)
    r = _one(res, kind="seeded", breakdown="source_age", bucket="1")
    assert (r["samples"], r["solve_rate"], r["on_policy_solve_rate"]) == (4, 0.5, 0.375)
    r = _one(res, kind="seeded", breakdown="prefix_len", bucket="2-3")
    assert (r["samples"], r["solve_rate"]) == (2, 0.5)
    r = _one(res, kind="seeded", breakdown="prefix_len", bucket="4-7")
    assert r["samples"] == 4
    r = _one(res, kind="offpolicy_full", breakdown="prefix_len", bucket="8-15")
    assert (r["samples"], r["solve_rate"], r["vs_on_policy"]) == (1, 1.0, 0.5)
    assert not _by(res, kind="on_policy", breakdown="source_step")  # on-policy only as the baseline row


def test_entropy_accuracy(con):
    res = run_named(con, "entropy_accuracy")
    assert [r["iteration"] for r in res.to_dicts()] == [0, 1, 2, 3]
    for r in res.to_dicts():
        k = r["iteration"]
        for p in POPS:
            if k < ITERATIONS:
                assert r[f"entropy_{p}"] == pytest.approx(entropy(k, p))
                assert r[f"eff_entropy_{p}"] == pytest.approx(entropy(k, p) - 0.05)
            else:
                assert r[f"entropy_{p}"] is None
        if k in EVAL:
            assert r["accuracy"] == EVAL[k]["eval/accuracy"]
            assert list(r["pass_at_k"].items()) == [
                (1, EVAL[k]["eval/pass@1"]),
                (2, EVAL[k]["eval/pass@2"]),
                (16, EVAL[k]["eval/pass@16"]),
            ]  # ordered by k, not text
        else:
            assert r["accuracy"] is None and r["pass_at_k"] is None


def test_clip_fraction(con):
    res = run_named(con, "clip_fraction")
    assert len(res) == ITERATIONS * len(POPS)
    assert [r["population"] for r in res.to_dicts()][::ITERATIONS] == list(POPS)
    for r in res.to_dicts():
        assert r["clipfrac"] == pytest.approx(clipfrac(r["iteration"], r["population"]))
        assert r["clipfrac_adv"] == pytest.approx(clipfrac(r["iteration"], r["population"]) / 2)


def test_runs_summary(runs):
    c = connect(None, runs)
    res = run_named(c, "runs")
    c.close()
    r = _one(res, run_id="syn")
    assert (r["algorithm"], r["iterations"], r["iterations_done"]) == ("thinking_seeds", ITERATIONS, ITERATIONS)
    assert (r["last_eval_step"], r["last_accuracy"], r["best_accuracy"]) == (3, 0.35, 0.35)
    assert (r["prefixes"], r["rollouts"], r["pool_checkpoints"]) == (6, 15, 2)
    r = _one(res, run_id="fresh")
    assert (r["iterations_done"], r["last_accuracy"], r["rollouts"]) == (0, None, 0)


# ---------------------------------------------------------------------------------------------
# read-only
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, kind",
    [
        ("COPY (SELECT 1) TO '{target}'", "COPY"),
        ("COPY rollouts TO '{target}' (FORMAT parquet)", "COPY"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("INSERT INTO metrics VALUES ('syn', 0, 'x', 'y', 1.0)", "INSERT"),
        ("ATTACH '{target}' AS other", "ATTACH"),
        ("DROP VIEW rollouts", "DROP"),
        ("SET enable_external_access = true", "SET"),
        ("SELECT 1; DROP VIEW prefixes", "DROP"),
        ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'", "EXPLAIN"),
        ("EXPORT DATABASE '{dir}'", "EXPORT"),
        ("INSTALL httpfs", "LOAD"),
    ],
)
def test_writes_are_refused(runs, sql, kind):
    root = runs / "syn"
    target = root / "rollouts" / "iteration=1" / "rollouts.parquet"
    before = snapshot_files(runs)
    c = connect("syn", runs)
    with pytest.raises(QueryError, match=f"refused {kind} statement.*read-only"):
        query(c, sql.format(target=target, dir=root / "export"))
    # nothing ran: the views are intact and no file changed
    assert query(c, "SELECT count(*) FROM rollouts").rows == [(15,)]
    assert query(c, "SELECT count(*) FROM prefixes").rows == [(6,)]
    c.close()
    assert snapshot_files(runs) == before


def test_engine_refuses_file_access_even_without_the_check(runs):
    """The sealed connection itself cannot touch files: a caller bypassing query() is stopped too."""
    target = runs / "syn" / "rollouts" / "iteration=1" / "rollouts.parquet"
    before = snapshot_files(runs)
    c = connect("syn", runs)
    for sql in (
        f"COPY (SELECT 1) TO '{target}'",
        f"ATTACH '{runs}/x.db'",
        f"EXPORT DATABASE '{runs}/exp'",
        "SELECT * FROM read_text('/etc/hostname')",
        f"SELECT * FROM read_parquet('{target}')",
    ):
        with pytest.raises(duckdb.Error, match="(?i)disabled|permission"):
            c.execute(sql)
    with pytest.raises(duckdb.Error, match="(?i)locked"):
        c.execute("SET enable_external_access = true")
    with pytest.raises(QueryError, match="Permission"):
        query(c, "SELECT * FROM read_text('/etc/hostname')")  # a SELECT passes the check, the engine stops it
    c.close()
    assert snapshot_files(runs) == before


def test_read_only_statements_are_allowed(con):
    assert query(con, "SELECT 1 AS a; SELECT 2 AS b").to_dicts() == [{"b": 2}]
    assert "rollouts" in query(con, "SHOW TABLES").column("name")
    assert len(query(con, "DESCRIBE metrics")) == 5
    assert query(con, "FROM metrics SELECT count(*) WHERE stage = 'evaluate'").rows == [(10,)]
    assert len(query(con, "SUMMARIZE SELECT value FROM metrics")) == 1
    assert len(query(con, "EXPLAIN SELECT * FROM rollouts")) >= 1
    piv = query(
        con,
        "PIVOT (SELECT iteration, name, value FROM metrics WHERE name = 'eval/accuracy') "
        "ON name USING first(value) ORDER BY iteration",
    )
    assert piv.rows == [(0, 0.2), (3, 0.35)]
    with pytest.raises(QueryError, match="cannot parse"):
        query(con, "SELEC 1")
    with pytest.raises(QueryError, match="empty"):
        query(con, "  ")
    with pytest.raises(QueryError, match="unknown named query"):
        run_named(con, "nope")
