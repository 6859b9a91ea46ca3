"""`ts sql -f csv` with DuckDB formatting the floats (store/sql_stream.py `doubles_as_text`, issue 53):
the bytes printed are the ones Python's csv module writes for the rows `query()` returns (what the CSV
output was before), for every named query, for every type the views and a free query can return, in
the order the query gives; and DuckDB's text of a DOUBLE is Python's repr of it."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import struct

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from tests.helpers.synthetic_run import make_run
from thinking_seeds.flows.cli.output import OutputFormat, _csv_cell
from thinking_seeds.flows.cli.sql_output import print_stream
from thinking_seeds.store.sql import NAMED_QUERIES, connect, query, stream


def _doubles() -> list[float]:
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**63, 20_000, dtype=np.int64).view(np.float64)  # every exponent, both signs
    edge = [0.0, -0.0, 1.0, 0.1, 1 / 3, 100.0, 1e15, 1e16, 1e-4, 1e-5, 123456789012345680.0, 5e-324,
            1.7976931348623157e308, 2.0**-1074, float("nan"), float("inf"), -float("inf")]  # fmt: skip
    return edge + list(rng.random(5_000)) + [float(x) for x in bits] + [-float(x) for x in bits[:100]]


def test_duckdb_text_of_a_double_is_python_repr():
    con = duckdb.connect()
    con.register("t", pa.table({"x": pa.array(_doubles(), pa.float64())}))
    got = [r[0] for r in query(con, "SELECT x FROM t", timeout=None).rows]
    text = stream(con, "SELECT x FROM t", timeout=None, doubles_as_text=True)
    rows = [r for batch in text.batches for r in batch]
    assert text.types == ["VARCHAR"]
    assert len(rows) == len(got) == len(_doubles())
    bad = [(v, s) for v, (s,) in zip(got, rows, strict=True) if s != repr(v)]
    assert not bad, bad[:5]
    assert any(math.isnan(v) for v in got) and struct.pack("<d", got[1]) == struct.pack("<d", -0.0)


def _csv_before(columns: list[str], rows: list[tuple]) -> str:
    """What `ts sql -f csv` printed before: Python's csv module over _csv_cell of each value."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows([[_csv_cell(v) for v in r] for r in rows])
    return buf.getvalue()


def _csv_now(con, sql: str, batch_rows: int | None = None) -> str:
    out = io.StringIO()
    res = stream(con, sql, timeout=None, batch_rows=batch_rows, doubles_as_text=True)
    with contextlib.redirect_stdout(out):
        print_stream(res.columns, res.batches, OutputFormat.csv, None, None, res.types)
    return out.getvalue()


# Free queries: every kind of column (plain, lists, maps, structs, dates, decimals, float32, blobs),
# NULLs in each, duplicate names, a DOUBLE beside a FLOAT, ORDER BY that is not the insertion order,
# several statements, a trailing comment, statements DuckDB does not bind as a plain SELECT. (Not
# SUMMARIZE: its quantiles are approximate, and two runs of it may differ in the last digits.)
FREE = [
    "SELECT kind, reward, advantage, prefix_len, old_logprobs FROM rollouts ORDER BY reward DESC, sample_id",
    "SELECT 1.5::DOUBLE AS a, 1.5::DOUBLE AS a, NULL::DOUBLE AS b, 'x,\"y\"' AS c, 0.1::FLOAT AS f, true AS t",
    "SELECT [0.1, NULL, 1e300]::DOUBLE[] AS l, map([1, 2], [0.5, NULL]) AS m, {'a': 0.25, 'b': 'z'} AS s, "
    "DATE '2026-12-07' AS d, TIMESTAMPTZ '2026-12-07 10:00:00+00' AS ts, 12.50::DECIMAL(6, 2) AS dec, "
    "'\\x01'::BLOB AS b, 'nan'::DOUBLE AS n, '-inf'::DOUBLE AS i",
    "SELECT range AS k, range / 7 AS q, CASE WHEN range % 3 = 0 THEN NULL ELSE sqrt(range) END AS r "
    "FROM range(25000) ORDER BY k DESC",
    "SELECT 1 AS one; SELECT iteration, avg(reward) AS r FROM rollouts GROUP BY iteration ORDER BY 1 -- a comment",
    "DESCRIBE SELECT reward FROM rollouts",
    "PIVOT rollouts ON kind USING avg(reward) GROUP BY iteration ORDER BY iteration",  # several statements
    "EXPLAIN SELECT reward FROM rollouts",
    "SELECT ''::VARCHAR AS only UNION ALL SELECT NULL",  # a lone empty field: the csv module quotes it
]


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    make_run(base, "syn")
    c = connect("syn", base)
    yield c
    c.close()


@pytest.mark.parametrize("name", list(NAMED_QUERIES))
def test_every_named_query_prints_the_same_csv(con, name):
    sql = NAMED_QUERIES[name][1]
    before = query(con, sql, timeout=None)
    assert _csv_now(con, sql) == _csv_before(before.columns, before.rows)


@pytest.mark.parametrize("sql", FREE)
def test_free_queries_print_the_same_csv(con, sql):
    before = query(con, sql, timeout=None)
    now = _csv_now(con, sql, batch_rows=1000)  # several batches: the order holds across them
    assert now == _csv_before(before.columns, before.rows)
