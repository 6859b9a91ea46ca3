"""SQL over the prefix corpus at scale (issue #15): the derived columns (prefix_len, 3-gram codes) in runs written
before and after it existed, views built only for what a query reads, the history query."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.synthetic_run import make_run, prefix_rows
from thinking_seeds.pipeline.rows import PrefixRow, read_rows, write_rows
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA, PREFIX_SCHEMA, ngram_codes, with_derived_prefix_columns
from thinking_seeds.store.sql import NAMED_QUERIES, VIEWS, QueryError, connect, query, run_named, views_in

# ---------------------------------------------------------------------------------------------
# prefix files with and without the derived columns
# ---------------------------------------------------------------------------------------------

TEXTS = ["aaaa", "abcd", "héllo→wörld", "", "ab", "abcab", "日本語のテキスト"]


def _rows(run_id: str) -> list[dict]:
    rows = []
    for j, text in enumerate(TEXTS):
        k = 1 + j % 3
        rows.append(
            {
                "run_id": run_id,
                "iteration": k,
                "prompt_id": f"p{j}",
                "seed_id": f"{k}-p{j}-0",
                "source_step": max(0, k - 1 - j % 2),
                "source_age": k - max(0, k - 1 - j % 2),
                "prefix_ratio": 0.5,
                "prefix_token_ids": list(range(len(text) + j)),  # token and character counts differ
                "behaviour_logprobs": [-0.5] * (len(text) + j),
                "prefix_text": text,
                "draft_len": 40,
                "draft_reward": None if j % 2 else 1.0,
            }
        )
    return rows


def _write(base, run_id: str, new: set[int]) -> RunDir:
    """A run whose iterations in `new` are written as the seeds stage writes now, the others as before."""
    run = RunDir.for_run(run_id, base)
    rows = _rows(run_id)
    for k in sorted({r["iteration"] for r in rows}):
        t = pa.Table.from_pylist([r for r in rows if r["iteration"] == k], schema=PREFIX_SCHEMA)
        if k in new:
            write_table_atomic(with_derived_prefix_columns(t), run.prefixes(k), schema=PREFIX_FILE_SCHEMA)
        else:
            write_table_atomic(t, run.prefixes(k), schema=PREFIX_SCHEMA)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    _write(base, "old", set())
    _write(base, "new", {1, 2, 3})
    _write(base, "mixed", {3})  # resumed by newer code after iteration 2
    return base


def _grams(text: str) -> tuple[int, int]:
    grams = [text[i : i + 3] for i in range(len(text) - 2)]
    return len(grams), len(set(grams))


def test_files_carry_prefix_len(runs):
    schema = pq.read_schema(RunDir.for_run("new", runs).prefixes(1))
    assert schema.names == PREFIX_FILE_SCHEMA.names
    assert schema.field("prefix_len").type == pa.int32()
    t = pq.read_table(RunDir.for_run("new", runs).prefixes(1))
    assert t.column("prefix_len").to_pylist() == [len(x) for x in t.column("prefix_token_ids").to_pylist()]
    assert PREFIX_SCHEMA.names == PREFIX_FILE_SCHEMA.names[: len(PREFIX_SCHEMA)]  # appended, nothing moved
    texts = t.column("prefix_text").to_pylist()
    assert t.column("prefix_ngram_count").to_pylist() == [_grams(x)[0] for x in texts]
    codes = t.column("prefix_ngrams").to_pylist()
    assert [len(c) for c in codes] == [_grams(x)[1] for x in texts]
    assert all(c == sorted(c) for c in codes)


def test_ngram_codes_are_one_to_one():
    """One code per distinct 3-gram (no hash collisions possible), across scripts and emoji."""
    grams = {"abc", "abd", "bca", "aaa", "é→w", "日本語", "😀😀a", "a😀😀", "\x00\x00\x01", "\U0010ffff" * 3}
    codes = {g: ngram_codes(g) for g in grams}
    assert all(len(c) == 1 for c in codes.values())
    assert len({c[0] for c in codes.values()}) == len(grams)
    assert ngram_codes("abcabc") == sorted(ngram_codes("abc") + ngram_codes("bca") + ngram_codes("cab"))
    assert ngram_codes("ab") == [] and ngram_codes("") == []


@pytest.mark.parametrize("run_id", ["old", "mixed"])
def test_old_and_mixed_runs_read_like_new_ones(runs, run_id):
    """Every column, prefix_len included (computed for old files), and its type, row for row."""
    got, want = connect(run_id, runs), connect("new", runs)
    sql = "SELECT * EXCLUDE (run_id) FROM prefixes ORDER BY seed_id"
    assert query(got, sql).rows == query(want, sql).rows
    describe = [(r[0], r[1]) for r in query(got, "DESCRIBE prefixes").rows]
    assert describe == [(r[0], r[1]) for r in query(want, "DESCRIBE prefixes").rows]
    assert [c for c, _ in describe] == PREFIX_FILE_SCHEMA.names
    assert dict(describe)["prefix_len"] == "INTEGER"
    lens = query(got, "SELECT prefix_len FROM prefixes ORDER BY seed_id").column("prefix_len")
    assert lens == [len(r["prefix_token_ids"]) for r in sorted(_rows(run_id), key=lambda r: r["seed_id"])]
    for name in ("prefix_diversity", "prefix_diversity_history", "runs"):
        a, b = run_named(got, name), run_named(want, name)
        drop = a.columns.index("run_id")
        assert [r[:drop] + r[drop + 1 :] for r in a.rows] == [r[:drop] + r[drop + 1 :] for r in b.rows], name
    got.close()
    want.close()


def test_ngrams_are_character_3grams(runs):
    """The n-gram counts are over characters (code points), as Python slices them."""
    con = connect("new", runs)
    res = run_named(con, "prefix_diversity")
    (r,) = [x for x in res.to_dicts() if x["breakdown"] == "all"]
    all_grams = [t[i : i + 3] for t in TEXTS for i in range(len(t) - 2)]
    assert (r["ngrams"], r["distinct_ngrams"]) == (len(all_grams), len(set(all_grams)))
    assert r["prefixes"] == len(TEXTS)
    con.close()


def test_all_runs_at_once(runs):
    con = connect(None, runs)
    res = query(con, "SELECT run_id, count(*) AS n, sum(prefix_len) AS s FROM prefixes GROUP BY run_id ORDER BY run_id")
    total = sum(len(r["prefix_token_ids"]) for r in _rows("x"))
    assert res.rows == [("mixed", len(TEXTS), total), ("new", len(TEXTS), total), ("old", len(TEXTS), total)]
    con.close()


def test_extra_columns_and_a_bad_prefix_len(tmp_path):
    """An old file's own extra column is kept; a file whose prefix_len is not a number is left out."""
    run = _write(tmp_path, "x", {2})
    t = pq.read_table(run.prefixes(1)).append_column("note", pa.array(["n"] * 3))
    pq.write_table(t, run.prefixes(1))
    bad = pq.read_table(run.prefixes(3))
    bad = bad.append_column("prefix_len", pa.array(["long"] * bad.num_rows))
    pq.write_table(bad, run.prefixes(3))
    damaged: list[str] = []
    con = connect("x", tmp_path, damaged=damaged)
    assert len(damaged) == 1 and "prefix_len" in damaged[0] and "iteration=3" in damaged[0]
    res = query(con, "SELECT iteration, note, prefix_len FROM prefixes ORDER BY seed_id")
    assert {r[0] for r in res.rows} == {1, 2}
    assert {r[1] for r in res.rows if r[0] == 1} == {"n"} and {r[1] for r in res.rows if r[0] == 2} == {None}
    assert all(isinstance(r[2], int) for r in res.rows)
    con.close()


def test_pipeline_reads_the_same_rows_from_old_and_new_files(tmp_path):
    """What the continuation stage reads (read_rows) does not depend on the file's format."""
    rows = [PrefixRow(**r) for r in _rows("r")]
    new_path = write_rows(PrefixRow, rows, tmp_path / "new" / "prefixes.parquet")
    assert pq.read_schema(new_path).names == PREFIX_FILE_SCHEMA.names
    old_path = tmp_path / "old" / "prefixes.parquet"
    write_table_atomic(
        pa.Table.from_pylist([r for r in _rows("r")], schema=PREFIX_SCHEMA), old_path, schema=PREFIX_SCHEMA
    )
    assert read_rows(PrefixRow, new_path) == read_rows(PrefixRow, old_path) == rows


# ---------------------------------------------------------------------------------------------
# only the views a query reads
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, want",
    [
        ("select 1", set()),
        ("SELECT 1 + 1, 'x'", set()),
        ("select count(*) from prefixes", {"prefixes"}),
        ('SELECT * FROM "Rollouts" r JOIN metrics m USING (run_id)', {"rollouts", "metrics"}),
        ("FROM configs", {"configs"}),
        ("select * from query_table('checkpoints')", {"checkpoints"}),
        ("show tables", set(VIEWS)),
        ("DESCRIBE", set(VIEWS)),
        ("select * from duckdb_views()", set(VIEWS)),
        ("select * from information_schema.columns", set(VIEWS)),
        ("select ( -- unclosed", set()),
        # read as tables, not as words: a column or a string named like a view opens no files
        ("select 'rollouts' AS kind, count(*) AS prefixes from metrics", {"metrics"}),
        (NAMED_QUERIES["runs"][1], {"corpus_files", "checkpoints", "configs", "metrics"}),
        (NAMED_QUERIES["prefix_diversity"][1], {"prefix_groups", "ngram_pairs"}),
    ],
)
def test_views_in(sql, want):
    assert views_in(sql) == want


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    base = tmp_path_factory.mktemp("syn")
    make_run(base, "syn")
    return base


@pytest.mark.parametrize("name", list(NAMED_QUERIES))
def test_named_queries_need_only_their_views(syn, name):
    sql = NAMED_QUERIES[name][1]
    some, every = connect("syn", syn, views=views_in(sql)), connect("syn", syn)
    assert run_named(some, name).rows == run_named(every, name).rows
    some.close()
    every.close()


def test_views_not_asked_for_are_not_opened(syn, tmp_path):
    """A damaged rollouts file does not trouble a query on prefixes: its view is not built."""
    import shutil

    shutil.copytree(syn / "syn", tmp_path / "syn")
    (tmp_path / "syn" / "rollouts" / "iteration=1" / "rollouts.parquet").write_bytes(b"PAR1 not parquet")
    damaged: list[str] = []
    con = connect("syn", tmp_path, damaged=damaged, views={"prefixes"})
    assert damaged == []
    assert query(con, "SELECT count(*) FROM prefixes").rows == [(6,)]
    with pytest.raises(QueryError, match="rollouts"):
        query(con, "SELECT count(*) FROM rollouts")
    con.close()
    con = connect("syn", tmp_path, damaged=damaged)
    assert len(damaged) == 1 and "rollouts.parquet" in damaged[0]
    con.close()
    with pytest.raises(ValueError, match="unknown view"):
        connect("syn", tmp_path, views={"prefixes", "bogus"})


def test_corpus_files_count_what_the_views_hold(runs, syn, tmp_path):
    """corpus_files (row counts from the footers) agrees with count(*) over the views, per run,
    view and iteration, for old and new prefix files; a damaged file is left out of both, named once."""
    import shutil

    for base in (runs, syn):
        con = connect(None, base)
        got = query(con, "SELECT run_id, view, iteration, rows FROM corpus_files ORDER BY ALL").rows
        want = query(
            con,
            "SELECT run_id, 'prefixes' AS view, iteration, count(*) FROM prefixes GROUP BY ALL UNION ALL "
            "SELECT run_id, 'rollouts', iteration, count(*) FROM rollouts GROUP BY ALL ORDER BY ALL",
        ).rows
        assert got == want and got
        con.close()
    shutil.copytree(syn / "syn", tmp_path / "syn")
    (tmp_path / "syn" / "rollouts" / "iteration=1" / "rollouts.parquet").write_bytes(b"PAR1 not parquet")
    damaged: list[str] = []
    con = connect("syn", tmp_path, damaged=damaged)
    assert len(damaged) == 1 and "iteration=1" in damaged[0]
    n = query(con, "SELECT count(*) FROM rollouts").rows[0][0]
    assert query(con, "SELECT sum(rows) FROM corpus_files WHERE view = 'rollouts'").rows[0][0] == n
    summary = run_named(con, "runs").to_dicts()[0]
    assert summary["rollouts"] == n and summary["prefixes"] == query(con, "SELECT count(*) FROM prefixes").rows[0][0]
    con.close()


# ---------------------------------------------------------------------------------------------
# diversity over the run's history
# ---------------------------------------------------------------------------------------------


def test_prefix_diversity_history(syn):
    """tests/helpers/synthetic_run.PREFIXES by iteration, counted by hand."""
    con = connect("syn", syn)
    res = run_named(con, "prefix_diversity_history")
    got = [(r["iteration"], r["prefixes"], r["ngrams"], r["distinct_ngrams"]) for r in res.to_dicts()]
    assert got == [
        (1, 2, 4, 3),  # "aaaa" (aaa, aaa), "abcd" (abc, bcd)
        (2, 4, 4, 4),  # "xyz", "ab", "abcab" (abc, bca, cab), ""
    ]
    r1, r2 = res.to_dicts()
    assert r1["distinct_ratio"] == pytest.approx(0.75) and r2["distinct_ratio"] == pytest.approx(1.0)
    assert (r1["mean_source_age"], r2["mean_source_age"]) == (pytest.approx(1.0), pytest.approx(1.5))
    assert r1["mean_prefix_len"] == pytest.approx(4.0) and r2["mean_prefix_len"] == pytest.approx(2.5)
    assert len(prefix_rows("syn")) == 6
    con.close()


def test_report_survives_a_failing_query(syn, tmp_path, monkeypatch):
    """A named query that runs out of memory (or time) costs its table, not the report."""
    import shutil

    from thinking_seeds.evals import report as report_mod

    shutil.copytree(syn / "syn", tmp_path / "syn")
    real = report_mod.run_named

    def run_named_oom(con, name, timeout=None):
        if name == "prefix_diversity":
            raise QueryError("OutOfMemoryException: Out of Memory Error: could not allocate block")
        return real(con, name, timeout)

    monkeypatch.setattr(report_mod, "run_named", run_named_oom)
    failures: dict[str, str] = {}
    path = report_mod.write_report("syn", tmp_path, failures=failures)
    text = path.read_text()
    assert list(failures) == ["prefix_diversity"]
    assert "_the query failed: OutOfMemoryException" in text
    assert "### seeded_solve_rate" in text and "| syn | offpolicy_full | all | all |" in text
    assert (path.parent / "prefix_diversity.png").is_file()  # the history half still has data
