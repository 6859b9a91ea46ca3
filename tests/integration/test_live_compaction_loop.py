"""The plain loop compacts each finished block behind itself (store/compaction.compact_behind, called by
pipeline/loop.stage_outcome as iteration k starts, before k has any manifest). A real run of the tiny
preset with blocks of 4 iterations: every finished block has its parts, ngram_pairs' chain runs from
block 0, and the named queries answer what the files alone say. (Before this test the loop's call
compacted nothing: it ran before iteration k's first manifest, so block k-4 did not count as finished;
a `ts train` of 190 iterations had no compacted folder.)"""

from __future__ import annotations

import shutil

import pytest

from tests.unit.test_sql_aggregates import _same
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store import compaction
from thinking_seeds.store.compaction import COMPACTED, PATTERNS, parts
from thinking_seeds.store.ngram_pairs import chained
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.sql import NAMED_QUERIES, connect, run_named

pytestmark = pytest.mark.slow

SMALL = [
    "iterations=9",  # blocks 0-3 and 4-7 finish when iterations 4 and 8 start
    "rollout.prompts_per_iteration=4",
    "rollout.group_size=4",
    "rollout.seeds_per_group=2",
    "data.train_size=40",
    "data.val_size=4",
    "data.test_size=4",
    "eval.every=100",
    "pool.snapshot_every=1",
    "update.launcher=in_process",
]


def _answers(base, run_id: str) -> dict:
    con = connect(run_id, base)
    try:
        return {name: run_named(con, name).rows for name in NAMED_QUERIES}
    finally:
        con.close()


def test_the_loop_compacts_each_finished_block_behind_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(compaction, "BLOCK", 4)
    run = RunDir.for_run("live", tmp_path / "runs")
    train(run, load_config("tiny", SMALL))  # waits for its compaction when it closes
    for kind in PATTERNS:
        got = parts(run.root, kind)
        assert [p.first for p in got] == [0, 4], kind
        assert all(p.fresh(run.root) for p in got), kind
    assert chained(parts(run.root, "ngram_pairs"), lambda p: p.fresh(run.root))[1] == 8
    bare = tmp_path / "bare"
    shutil.copytree(run.root, bare / "live", ignore=shutil.ignore_patterns(COMPACTED))
    _same(_answers(tmp_path / "runs", "live"), _answers(bare, "live"))
