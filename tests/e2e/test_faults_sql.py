"""`ts sql` sealed by structure (issue #11, item 3): an adversarial set of statements -- every statement
type DuckDB has, comments, several statements, table functions, the PIVOT forms that DuckDB plans as
several statements -- must change nothing in the connection or on disk; a query that never ends
comes back in one line; damaged files in one run do not take the other runs down (item 5)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from tests.helpers import REPO
from tests.helpers.synthetic_run import make_run, snapshot_files
from thinking_seeds.store.sql import QueryError, connect, query

# 10^15 pairs against a 10^5-row build side: streams in little memory and never ends
NEVER_ENDS = "SELECT count(*) FROM range(10000000000) a, range(100000) b WHERE a.range + b.range = -1"
PIV = "PIVOT (SELECT iteration, name, value FROM metrics) ON name USING first(value)"

ADVERSARIAL = [
    # one per DuckDB statement type other than SELECT (LOGICAL_PLAN and RELATION have no SQL form)
    "ALTER VIEW rollouts RENAME TO r2",
    "ANALYZE",
    "ATTACH '{tmp}/x.db' AS x",
    "CALL pragma_version()",
    "COPY (SELECT 1) TO '{tmp}/out.csv'",
    "COPY FROM DATABASE memory TO memory",
    "CREATE TABLE t AS SELECT 1",
    "CREATE MACRO m(a) AS a + 1",
    "DELETE FROM metrics",
    "DETACH memory",
    "DROP VIEW rollouts",
    "PREPARE p AS SELECT 1",
    "EXECUTE p",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{tmp}/out.csv'",
    "EXPLAIN CREATE TABLE t AS SELECT 1",
    "EXPORT DATABASE '{tmp}/exp'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "INSERT INTO metrics VALUES ('syn', 0, 'x', 'y', 1.0)",
    "MERGE INTO metrics USING (SELECT 1 AS i) s ON false WHEN NOT MATCHED THEN INSERT VALUES ('a', 0, 'b', 'c', 1.0)",
    "PRAGMA enable_profiling",
    "SET memory_limit = '100GB'",
    "RESET threads",
    "BEGIN TRANSACTION",
    "UPDATE metrics SET value = 0",
    "VACUUM",
    "SET VARIABLE v = 1",
    # statement kinds DuckDB plans as MULTI (the dynamic PIVOT's helper enum + the statement)
    f"CREATE TABLE t AS {PIV}",
    f"COPY ({PIV}) TO '.tmp/pivot.csv'",
    f"COPY ({PIV}) TO '{{tmp}}/pivot.csv'",
    f"CREATE VIEW v AS {PIV}",
    f"INSERT INTO metrics SELECT * FROM ({PIV})",
    # comments and several statements
    "/* SELECT */ CREATE TABLE t AS SELECT 1",
    "-- a comment\nDROP VIEW prefixes",
    "SELECT 1; CREATE TABLE t AS SELECT 1",
    "SELECT 1 /* ; */ ; DROP VIEW metrics -- SELECT",
    f"/* PIVOT */ CREATE TABLE t AS {PIV}",
    f"EXPLAIN /* SELECT */ CREATE TABLE t AS {PIV}",
]

TABLE_FUNCTIONS = [  # plain SELECTs: they pass the parser, and the sealed engine must stop them
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM read_csv('{tmp}/data.csv')",
    "SELECT * FROM read_csv('.tmp/data.csv')",
    "SELECT * FROM glob('{tmp}/*')",
    "SELECT * FROM read_parquet('{runs}/syn/rollouts/iteration=1/rollouts.parquet')",
    "SELECT * FROM query('CREATE TABLE t AS SELECT 1')",
    "SELECT * FROM query_table('duckdb_settings')",
]


@pytest.fixture
def sealed(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    make_run(runs, "syn")
    monkeypatch.chdir(tmp_path)  # DuckDB's default temp directory is ./.tmp
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "data.csv").write_text("a\n1\n")
    (tmp_path / "data.csv").write_text("a\n1\n")
    return runs


def _objects(con) -> list:
    return query(
        con,
        "SELECT database_name, schema_name, table_name FROM duckdb_tables() UNION ALL "
        "SELECT database_name, schema_name, view_name FROM duckdb_views() WHERE NOT internal "
        "UNION ALL SELECT database_name, schema_name, function_name FROM duckdb_functions() "
        "WHERE function_type = 'macro' AND NOT internal ORDER BY ALL",
    ).rows


@pytest.mark.parametrize("sql", ADVERSARIAL)
def test_every_non_query_statement_is_refused_and_changes_nothing(sealed, tmp_path, sql):
    before = snapshot_files(tmp_path)
    con = connect("syn", sealed)
    objects = _objects(con)
    with pytest.raises(QueryError, match="refused|cannot parse"):  # DuckDB rejects some of them itself
        query(con, sql.format(tmp=tmp_path))
    assert _objects(con) == objects
    assert query(con, "SELECT count(*) FROM rollouts").rows == [(15,)]
    con.close()
    assert snapshot_files(tmp_path) == before


@pytest.mark.parametrize("sql", TABLE_FUNCTIONS)
def test_table_functions_cannot_reach_files(sealed, tmp_path, sql):
    before = snapshot_files(tmp_path)
    con = connect("syn", sealed)
    with pytest.raises(QueryError):
        query(con, sql.format(tmp=tmp_path, runs=sealed))
    con.close()
    assert snapshot_files(tmp_path) == before


def test_plain_queries_still_run(sealed):
    con = connect("syn", sealed)
    assert query(con, "/* c */ SELECT 1 AS a -- x").rows == [(1,)]
    assert len(query(con, f"{PIV} ORDER BY iteration")) == 4  # a dynamic PIVOT is a query
    assert len(query(con, "EXPLAIN /* c */ SELECT * FROM rollouts")) >= 1
    assert query(con, "FROM metrics SELECT count(*) > 0").rows == [(True,)]


def test_resources_are_capped_and_no_directory_is_open(sealed):
    con = connect("syn", sealed)
    settings = dict(
        query(
            con,
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('temp_directory', 'allowed_directories', 'allowed_paths', 'enable_external_access', "
            "'lock_configuration', 'threads', 'memory_limit')",
        ).rows
    )
    assert settings["temp_directory"] == ""
    assert settings["allowed_directories"] in ("[]", "")
    assert settings["enable_external_access"] == "false" and settings["lock_configuration"] == "true"
    assert int(settings["threads"]) <= 2
    with pytest.raises(duckdb.Error, match="(?i)locked"):
        con.execute("SET temp_directory = '/tmp'")


def test_a_query_that_never_ends_times_out(sealed):
    con = connect("syn", sealed)
    t0 = time.monotonic()
    with pytest.raises(QueryError, match=r"timed out after 1 s.*--timeout"):
        query(con, NEVER_ENDS, timeout=1)
    assert time.monotonic() - t0 < 15
    assert query(con, "SELECT 42").rows == [(42,)]  # the connection is usable again


def test_a_ctrl_c_while_the_views_are_set_up_comes_after_them(sealed, monkeypatch, python_ctrl_c):
    """A Ctrl-C during view registration used to be raised inside DuckDB's Python callback and come
    back as DuckDB's "reading the schema ... failed: KeyboardInterrupt" (exit 2, "damaged"); it is
    now held until the views are registered and arrives as a plain KeyboardInterrupt."""
    import thinking_seeds.store.sql as sql_mod

    real, seen = sql_mod.register_views, []

    def ctrl_c_first(*args, **kw):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # without the deferral the KeyboardInterrupt is raised here, before any view
        real(*args, **kw)
        seen.append("registered")

    monkeypatch.setattr(sql_mod, "register_views", ctrl_c_first)
    with pytest.raises(KeyboardInterrupt):
        connect("syn", sealed)
    assert seen == ["registered"]
    monkeypatch.setattr(sql_mod, "register_views", real)
    assert query(connect("syn", sealed), "SELECT 42").rows == [(42,)]  # nothing left blocked


def _default_ctrl_c() -> None:
    # A shell starts a background job (`pytest ... &`) with SIGINT ignored, and a child inherits
    # that across exec: Python then keeps it ignored and a Ctrl-C sent to `ts` would do nothing.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ts(args: list[str], runs: Path, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), TS_RUNS_DIR=str(runs))
    return subprocess.Popen(
        [sys.executable, "-m", "thinking_seeds.flows.cli", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_ctrl_c,
        **kw,
    )


def test_cli_timeout_and_ctrl_c_come_back_in_one_line(sealed):
    t0 = time.monotonic()
    p = _ts(["sql", "--timeout", "1", "--run-id", "syn", NEVER_ENDS], sealed)
    out, err = p.communicate(timeout=60)
    first = time.monotonic() - t0  # the imports, the connection, the query's 1 s and the exit
    assert p.returncode == 2 and len(err.strip().splitlines()) == 1 and "timed out" in err, err
    p = _ts(["sql", "--run-id", "syn", NEVER_ENDS], sealed)
    # Past the imports (as long as the whole first call took, at most 6 s): the query is running
    # (an earlier Ctrl-C must give one line too).
    time.sleep(min(6.0, first + 0.5))
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert time.monotonic() - t0 < 10
    assert p.returncode == 130 and len(err.strip().splitlines()) == 1 and "interrupted" in err, err


def test_one_damaged_run_does_not_take_the_others_down(sealed):
    """`ts runs` / `ts sql` over every run: a truncated file and a wrongly typed column in one run are
    skipped with one warning line each, naming the file and `ts check`."""
    make_run(sealed, "bad")
    bad = sorted((sealed / "bad" / "rollouts").glob("iteration=*/rollouts.parquet"))
    with open(bad[0], "r+b") as f:
        f.truncate(100)
    import pyarrow as pa
    import pyarrow.parquet as pq

    m = sorted((sealed / "bad" / "metrics").glob("iteration=*/*.parquet"))[0]
    t = pq.read_table(m)
    pq.write_table(t.set_column(t.schema.get_field_index("value"), "value", pa.array(["x"] * len(t))), m)
    p = _ts(["runs", "--format", "csv"], sealed)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "syn" in out and "bad" in out
    warnings = err.strip().splitlines()
    assert len(warnings) == 2 and all("ts check bad" in w for w in warnings), err
    assert any(str(bad[0]) in w for w in warnings) and any(str(m) in w for w in warnings)
    p = _ts(["sql", "SELECT run_id, count(*) FROM rollouts GROUP BY ALL ORDER BY 1", "--format", "csv"], sealed)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    rows = dict(line.split(",") for line in out.splitlines()[1:])
    assert rows["syn"] == "15" and 0 < int(rows["bad"]) < 15  # the other files of the damaged run still count
