"""pipeline.seeds_block: the seeds of the iterations between two snapshots drafted in one go, each pool
member's weights loaded once for the block: the same prefixes, bit for bit, as drafting per iteration."""

from __future__ import annotations

import pytest

from thinking_seeds.config import load_config
from thinking_seeds.engine.rollout import HFEngine
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

# One snapshot (θ_0, at iteration 0): iterations 1-3 have the same pool, one block.
_LOAD_STATE = HFEngine._load_state
RUN = ["iterations=4", "pool.snapshot_every=4", "eval.every=100", "eval.seeded=false", "pipeline.overlap=false"]


def _train(tmp_path, tiny_overrides, monkeypatch, block: int, extra: tuple = ()) -> tuple[RunDir, list[str]]:
    loads: list[str] = []
    real = _LOAD_STATE  # not the last run's counter

    def counted(self, state, checkpoint_dir):
        loads.append(checkpoint_dir.parent.name + "/" + checkpoint_dir.name)
        return real(self, state, checkpoint_dir)

    monkeypatch.setattr(HFEngine, "_load_state", counted)
    cfg = load_config("tiny", tiny_overrides + RUN + [f"pipeline.seeds_block={block}", *extra])
    return train(RunDir.for_run("blk", tmp_path / f"b{block}"), cfg), loads


def test_block_drafting_loads_each_member_once_and_samples_the_same(tmp_path, tiny_overrides, monkeypatch):
    one, loads_one = _train(tmp_path, tiny_overrides, monkeypatch, 1)
    block, loads_block = _train(tmp_path, tiny_overrides, monkeypatch, 4)
    for k in range(4):
        assert read_table(block.prefixes(k)).equals(read_table(one.prefixes(k))), f"seeds {k} differ"
        assert read_table(block.rollouts(k)).equals(read_table(one.rollouts(k)))
    member = "checkpoints/step_000000"
    assert loads_one.count(member) == 3, loads_one  # the seeds of iterations 1, 2, 3: θ_k in between
    assert loads_block.count(member) == 1, loads_block  # once, for the block of 1-3
    banked = [block.read_manifest(k, "seeds").metrics.get("perf/seeds_banked") for k in range(4)]
    assert banked == [None, None, 1.0, 1.0]


@pytest.mark.slow  # two 8-iteration runs (~30 s): CI's second step
def test_a_block_with_two_members_samples_what_each_iteration_samples(tmp_path, tiny_overrides, monkeypatch):
    """Snapshots at 0, 3 and 6: iterations 4-6 are one block drafted by θ_0 and θ_3 together. The HF engine
    stacks the members' weights (engine/stacked.py) in the groups each iteration alone makes
    (sharding.shard_groups keyed by iteration), so the block's prefixes and rollouts are the per-iteration
    run's, bit for bit."""
    run = ("iterations=8", "pool.snapshot_every=3")
    one, _ = _train(tmp_path, tiny_overrides, monkeypatch, 1, run)
    block, _ = _train(tmp_path, tiny_overrides, monkeypatch, 4, run)
    assert block.read_manifest(5, "seeds").metrics.get("perf/seeds_banked") == 1.0  # drafted with 4's block
    sources = set(read_table(block.prefixes(5)).column("source_step").to_pylist())
    assert sources == {0, 3}, sources  # two members: stacked
    for k in range(8):
        assert read_table(block.prefixes(k)).equals(read_table(one.prefixes(k))), f"seeds {k} differ"
        assert read_table(block.rollouts(k)).equals(read_table(one.rollouts(k))), f"rollouts {k} differ"
