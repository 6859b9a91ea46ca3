"""ngram_pairs (store/ngram_pairs.py): a block's compacted part holds only the 3-gram pairs no earlier
block had, and is read only while the chain of parts before it is what it was made against; after a
break `ts sql` reads ngram_keys, and prefix_diversity answers what the files say throughout."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest

from tests.unit.test_sql_aggregates import ITERATIONS, _answers, _run
from thinking_seeds.store import compaction
from thinking_seeds.store.compaction import compact, parts
from thinking_seeds.store.ngram_pairs import chained
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.prefix_aggregates import write_prefix_aggregates
from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA
from thinking_seeds.store.sql import connect, query

DIVERSITY = ("prefix_diversity", "prefix_diversity_history")


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(compaction, "BLOCK", 3)  # 8 iterations: blocks 0-2 and 3-5 are finished


def _pairs(part) -> set[tuple]:
    return {tuple(r.values()) for r in pq.read_table(part.path).to_pylist()}


def _files_say(run, tmp_path) -> dict:
    """The diversity queries over the run's files alone (no compacted part)."""
    bare = tmp_path / "bare"
    shutil.rmtree(bare, ignore_errors=True)
    shutil.copytree(run.root, bare / run.run_id, ignore=shutil.ignore_patterns("compacted"))
    got = _answers(bare, run.run_id)
    return {q: got[q] for q in DIVERSITY}


def test_each_pair_is_kept_in_the_first_block_that_has_it(tmp_path):
    run = _run(tmp_path, "a", set(range(ITERATIONS)))
    compact(run.root)
    first, second = parts(run.root, "ngram_pairs")
    assert (first.first, second.first) == (0, 3)
    a, b = _pairs(first), _pairs(second)
    assert a and b and not a & b  # block 3 holds only pairs block 0 did not have
    pairs = (
        "SELECT DISTINCT run_id, 1, source_age, ngram FROM ngram_counts WHERE {w} "
        "UNION SELECT DISTINCT run_id, 2, len_lo, ngram FROM ngram_counts WHERE {w}"
    )
    con = connect("a", tmp_path)
    try:
        every = set(query(con, pairs.format(w="iteration < 6")).rows)
        own = set(query(con, pairs.format(w="iteration BETWEEN 3 AND 5")).rows)
    finally:
        con.close()
    assert a | b == every
    assert b < own  # block 3's own pairs, less those that recur from block 0


def test_a_broken_chain_is_read_through_ngram_keys_until_compacted_again(tmp_path):
    run = _run(tmp_path, "a", set(range(ITERATIONS)))
    compact(run.root)
    three_before = parts(run.root, "ngram_pairs")[1]
    # iteration 1 redone by hand (fewer prefixes, a new file): block 0's parts are stale
    write_table_atomic(pq.read_table(run.prefixes(1)).slice(0, 4), run.prefixes(1), schema=PREFIX_FILE_SCHEMA)
    write_prefix_aggregates(run.prefixes(1))
    want = _files_say(run, tmp_path)
    assert chained(parts(run.root, "ngram_pairs"), lambda p: p.fresh(run.root))[1] == 0
    assert {q: _answers(tmp_path, "a")[q] for q in DIVERSITY} == want

    # block 0 compacted again alone (as a run compacting behind itself would not, but `ts compact
    # --block` could): block 3's pair part, made against the old block 0, is still there and fresh
    # by its own files, yet no longer chains; ngram_keys answers for block 3
    compact(run.root, blocks=[0])
    zero, three = parts(run.root, "ngram_pairs")
    assert three == three_before and three.fresh(run.root)
    assert chained([zero, three], lambda p: p.fresh(run.root)) == ([zero], 3)
    assert {q: _answers(tmp_path, "a")[q] for q in DIVERSITY} == want

    written = compact(run.root)  # the chain made again from the break
    assert [p.name for p in written] == ["iterations=000003-000005.parquet"]
    assert chained(parts(run.root, "ngram_pairs"), lambda p: p.fresh(run.root))[1] == 6
    assert {q: _answers(tmp_path, "a")[q] for q in DIVERSITY} == want


def test_a_block_is_not_chained_past_a_block_without_its_part(tmp_path):
    run = _run(tmp_path, "a", set(range(ITERATIONS)))
    compact(run.root, views=("ngram_keys", "ngram_pairs"), blocks=[3])  # block 0 not compacted: no chain yet
    assert parts(run.root, "ngram_pairs") == []
    want = _files_say(run, tmp_path)
    assert {q: _answers(tmp_path, "a")[q] for q in DIVERSITY} == want
