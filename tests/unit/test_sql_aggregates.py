"""The seeds stage's per-iteration prefix aggregates (store/prefix_aggregates.py): every named query
answers the same from them as from the raw corpus, whatever mix of aggregates, compacted parts and
old or new prefix files a run holds; a stale aggregate is not read; the file is deterministic."""

from __future__ import annotations

import math
import os
import shutil
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.synthetic_run import make_run
from thinking_seeds.store import compaction
from thinking_seeds.store.compaction import compact
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.prefix_aggregates import AGGREGATES_NAME, fresh_aggregates, write_prefix_aggregates
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA, PREFIX_SCHEMA, with_derived_prefix_columns
from thinking_seeds.store.sql import NAMED_QUERIES, connect, query, run_named
from thinking_seeds.store.sql_queries import _len_label, _len_lo

ITERATIONS = 8
TEXTS = ["aaaa", "abcd", "héllo→wörld", "", "ab", "abcab", "日本語のテキスト", "x+1=2,2+3=5", "1-1=0"]
OLD = {2, 5}  # iterations whose prefix file is written as before the derived columns existed

# The diversity queries as they were before the aggregates (over the prefixes view itself): the
# reference that prefix_groups and the aggregates must reproduce.
_P = (
    f"SELECT run_id, iteration, source_age, prefix_len AS L, {_len_lo('prefix_len')} AS len_lo, "
    "prefix_ngram_count FROM prefixes"
)
REFERENCE = {
    "prefix_diversity": NAMED_QUERIES["prefix_diversity"][1]
    .replace("FROM prefix_groups GROUP BY GROUPING SETS", "FROM p GROUP BY GROUPING SETS")
    .replace("WITH pc AS", f"WITH p AS ({_P}), pc AS")
    .replace("CAST(sum(prefixes) AS BIGINT) AS prefixes", "count(*) AS prefixes")
    .replace("sum(prefix_len_sum) / sum(prefixes)", "avg(L)")
    .replace("sum(ngram_count_sum)", "sum(prefix_ngram_count)"),
    "prefix_diversity_history": """
WITH pc AS (
    SELECT run_id, iteration, count(*) AS prefixes, avg(prefix_len) AS mean_prefix_len,
           avg(source_age) FILTER (WHERE source_age >= 0) AS mean_source_age,
           CAST(sum(prefix_ngram_count) AS BIGINT) AS ngrams
    FROM prefixes GROUP BY ALL
),
g AS (SELECT run_id, iteration, unnest(prefix_ngrams) AS ngram FROM prefixes),
gc AS (SELECT run_id, iteration, count(DISTINCT ngram) AS distinct_ngrams FROM g GROUP BY ALL)
SELECT pc.run_id, pc.iteration, pc.prefixes, pc.mean_prefix_len, pc.mean_source_age, pc.ngrams,
       coalesce(gc.distinct_ngrams, 0) AS distinct_ngrams, gc.distinct_ngrams / nullif(pc.ngrams, 0) AS distinct_ratio
FROM pc LEFT JOIN gc USING (run_id, iteration)
ORDER BY pc.run_id, pc.iteration
""",
}
# seeded_solve_rate as it was before the rollout_groups roll-up (issue 53): over every rollout row
REFERENCE["seeded_solve_rate"] = f"""
WITH r AS (
    SELECT run_id, iteration, kind, source_step,
           CASE WHEN source_step IS NULL OR source_step < 0 THEN NULL ELSE iteration - source_step END AS source_age,
           {_len_lo("prefix_len")} AS len_lo,
           CAST(status = 'ok' AS DOUBLE) AS solved, reward
    FROM rollouts
    WHERE reward IS NOT NULL
),
c AS (
    SELECT run_id, iteration, kind, source_step, source_age, len_lo,
           count(*) AS n, sum(solved) AS solved, sum(reward) AS reward
    FROM r GROUP BY ALL
),
onp AS (  -- on-policy solve rate per iteration: the baseline, weighted like each group's samples
    SELECT run_id, iteration, sum(solved) / sum(n) AS on_rate FROM c WHERE kind = 'on_policy' GROUP BY ALL
),
cj AS (
    SELECT c.*, onp.on_rate * c.n AS on_sum, CASE WHEN onp.on_rate IS NULL THEN 0 ELSE c.n END AS on_n
    FROM c LEFT JOIN onp USING (run_id, iteration)
),
s AS (
    SELECT run_id, kind, 'all' AS breakdown, NULL::BIGINT AS key, sum(n) AS samples, sum(solved) / sum(n) AS solve_rate,
           sum(reward) / sum(n) AS mean_reward, sum(on_sum) / nullif(sum(on_n), 0) AS on_policy_solve_rate
    FROM cj GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'source_step', source_step, sum(n), sum(solved) / sum(n), sum(reward) / sum(n),
           sum(on_sum) / nullif(sum(on_n), 0)
    FROM cj WHERE kind <> 'on_policy' GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'source_age', source_age, sum(n), sum(solved) / sum(n), sum(reward) / sum(n),
           sum(on_sum) / nullif(sum(on_n), 0)
    FROM cj WHERE kind <> 'on_policy' GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'prefix_len', len_lo, sum(n), sum(solved) / sum(n), sum(reward) / sum(n),
           sum(on_sum) / nullif(sum(on_n), 0)
    FROM cj WHERE kind <> 'on_policy' GROUP BY ALL
)
SELECT run_id, kind, breakdown,
       CASE breakdown WHEN 'all' THEN 'all'
               WHEN 'prefix_len' THEN {_len_label("key")}
               ELSE CASE WHEN key IS NULL OR key < 0 THEN 'dataset' ELSE CAST(key AS VARCHAR) END END AS bucket,
       samples, solve_rate, mean_reward, on_policy_solve_rate,
       solve_rate - on_policy_solve_rate AS vs_on_policy
FROM s
ORDER BY run_id,
         CASE kind WHEN 'on_policy' THEN 0 WHEN 'seeded' THEN 1 ELSE 2 END,
         CASE breakdown WHEN 'all' THEN 0 WHEN 'source_step' THEN 1 WHEN 'source_age' THEN 2 ELSE 3 END,
         key
"""
# its distinct 3-grams as they were counted before the roll-ups (issue 53): over ngram_counts
_PAIRS = "SELECT DISTINCT run_id, breakdown AS gid, key, ngram FROM ngram_pairs"
_GROUPED = (
    "SELECT run_id, GROUPING(source_age, len_lo) AS gid, coalesce(source_age, len_lo) AS key, ngram "
    "FROM ngram_counts GROUP BY GROUPING SETS ((run_id, source_age, ngram), (run_id, len_lo, ngram))"
)
REFERENCE["prefix_diversity"] = REFERENCE["prefix_diversity"].replace(_PAIRS, _GROUPED)
assert "prefix_groups" not in REFERENCE["prefix_diversity"] and _len_label  # the rewrite took
assert "ngram_pairs" not in REFERENCE["prefix_diversity"] and "FROM rollouts" in REFERENCE["seeded_solve_rate"]


def _prefix_table(run_id: str, k: int) -> pa.Table:
    rows = []
    for j in range(11):
        text = TEXTS[(3 * k + j) % len(TEXTS)]
        step = -1 if j == 10 else [0, max(0, k - 3), max(0, k - 1)][j % 3]  # -1: data-set guidance
        n = len(text) // 2 + j
        rows.append(
            {
                "run_id": run_id,
                "iteration": k,
                "prompt_id": f"p{j % 4}",
                "seed_id": f"{k}-{j}",
                "source_step": step,
                "source_age": -1 if step < 0 else k - step,
                "prefix_ratio": 0.5,
                "prefix_token_ids": list(range(n)),
                "behaviour_logprobs": [-0.5] * n,
                "prefix_text": text,
                "draft_len": 40,
                "draft_reward": None,
            }
        )
    return pa.Table.from_pylist(rows, schema=PREFIX_SCHEMA)


def _run(base, run_id: str, aggregates: set[int]) -> RunDir:
    """The synthetic run (rollouts, metrics, pool) with ITERATIONS prefix files, aggregates beside
    the iterations in `aggregates`."""
    run = make_run(base, run_id)
    for k in range(ITERATIONS):
        t = _prefix_table(run_id, k)
        if k in OLD:
            write_table_atomic(t, run.prefixes(k), schema=PREFIX_SCHEMA)
        else:
            write_table_atomic(with_derived_prefix_columns(t), run.prefixes(k), schema=PREFIX_FILE_SCHEMA)
        if k in aggregates:
            write_prefix_aggregates(run.prefixes(k))
        run.write_manifest(Manifest("evaluate", k, "h"))
    return run


def _answers(base, run_id: str | None) -> dict[str, list[tuple]]:
    con = connect(run_id, base)
    try:
        out = {name: run_named(con, name).rows for name in NAMED_QUERIES}
        for name, sql in REFERENCE.items():
            out[f"reference:{name}"] = query(con, sql).rows
        return out
    finally:
        con.close()


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert len(a[name]) == len(b[name]), name
        for ra, rb in zip(a[name], b[name], strict=True):
            for x, y in zip(ra, rb, strict=True):
                if isinstance(x, datetime):  # configs.created_at: when each copy's config was written
                    continue
                if isinstance(x, float) and isinstance(y, float):
                    assert math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12), (name, ra, rb)
                else:
                    assert x == y, (name, ra, rb)


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    base = tmp_path_factory.mktemp("raw")
    _run(base, "a", set())
    return _answers(base, "a")


def test_named_queries_answer_the_same_from_aggregates(tmp_path, raw, monkeypatch):
    monkeypatch.setattr(compaction, "BLOCK", 3)
    every = set(range(ITERATIONS))
    _run(tmp_path / "all", "a", every)
    _same(_answers(tmp_path / "all", "a"), raw)
    _run(tmp_path / "some", "a", {0, 2, 3, 7})  # a run upgraded mid-way, and old files among them
    _same(_answers(tmp_path / "some", "a"), raw)
    run = _run(tmp_path / "parts", "a", every - {1, 6})
    assert compact(run.root)  # blocks 0-2 and 3-5 compacted; 6 and 7 from the raw file and aggregates
    _same(_answers(tmp_path / "parts", "a"), raw)
    # the diversity queries equal the reference SQL over the raw prefixes (prefix_groups is exact)
    for name in REFERENCE:
        _same({name: raw[name]}, {name: raw[f"reference:{name}"]})


def test_the_diversity_queries_do_not_read_the_corpus_when_aggregates_exist(tmp_path, raw):
    run = _run(tmp_path, "a", set(range(ITERATIONS)))
    for k in range(ITERATIONS):  # the prefix files' columns the queries would read, gone (same size)
        p = run.prefixes(k)
        st = os.stat(p)
        data = bytearray(p.read_bytes())
        data[8:-8] = bytes(len(data) - 16)  # unreadable, but the same size and mtime
        p.write_bytes(bytes(data))
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    con = connect("a", tmp_path, damaged=[])
    try:
        for name in ("prefix_diversity", "prefix_diversity_history"):
            assert run_named(con, name).rows == raw[name]
    finally:
        con.close()


def test_a_stale_aggregate_is_not_read(tmp_path):
    run = _run(tmp_path, "a", set(range(ITERATIONS)))
    p = run.prefixes(4)
    assert fresh_aggregates(p) == p.with_name(AGGREGATES_NAME)
    t = pq.read_table(p).slice(0, 3)  # a seeds stage redone by hand: fewer rows, a newer file
    write_table_atomic(t, p, schema=PREFIX_FILE_SCHEMA)
    assert fresh_aggregates(p) is None
    got = _answers(tmp_path, "a")
    shutil.copytree(run.root, tmp_path / "bare" / "a", ignore=shutil.ignore_patterns(AGGREGATES_NAME))
    _same(got, _answers(tmp_path / "bare", "a"))  # what the files say, no aggregate at all
    q = run.prefixes(5)  # the same bytes, but newer than its aggregate: not trusted either
    agg = os.stat(q.with_name(AGGREGATES_NAME)).st_mtime_ns
    assert fresh_aggregates(q) is not None
    os.utime(q, ns=(agg + 10**9, agg + 10**9))
    assert fresh_aggregates(q) is None


def test_aggregates_are_deterministic_and_small(tmp_path):
    run = _run(tmp_path, "a", set())
    p = run.prefixes(3)
    first = write_prefix_aggregates(p).read_bytes()
    again = write_prefix_aggregates(p).read_bytes()
    assert first == again  # the seeds stage's manifest hashes it: a resumed run writes it bit for bit
    meta = pq.read_metadata(p.with_name(AGGREGATES_NAME))
    assert meta.num_row_groups == 2  # summaries, then 3-grams: a view reads only the one it needs
    summary = pq.ParquetFile(p.with_name(AGGREGATES_NAME)).read_row_group(0)
    assert summary.column("ngram").null_count == summary.num_rows
    assert sum(summary.column("prefixes").to_pylist()) == pq.read_metadata(p).num_rows


def test_all_runs_at_once(tmp_path, raw):
    _run(tmp_path, "a", set(range(ITERATIONS)))
    _run(tmp_path, "b", set())
    both = _answers(tmp_path, None)
    for name in ("prefix_diversity", "prefix_diversity_history"):
        rows = both[name]
        assert {r[0] for r in rows} == {"a", "b"}
        assert [r for r in rows if r[0] == "a"] == raw[name]
        assert [r[1:] for r in rows if r[0] == "b"] == [r[1:] for r in raw[name]]


def test_a_copied_run_keeps_its_rows_run_id(tmp_path, raw):
    """The aggregates carry the prefix rows' run_id, not their folder's: a run copied under another
    name reads as one run, the same from aggregates as from the raw files beside them."""
    run = _run(tmp_path / "src", "a", {0, 1, 2, 6})
    shutil.copytree(run.root, tmp_path / "copy" / "b")  # copy2: times kept, so the aggregates stay fresh
    got = _answers(tmp_path / "copy", "b")
    for name in ("prefix_diversity", "prefix_diversity_history"):
        assert got[name] == raw[name], name
