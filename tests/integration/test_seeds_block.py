"""pipeline.seeds_block: the seeds of the iterations between two snapshots drafted in one go, each pool
member's weights loaded once for the block: the same prefixes, bit for bit, as drafting per iteration."""

from __future__ import annotations

from thinking_seeds.config import load_config
from thinking_seeds.engine.rollout import HFEngine
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

# One snapshot (θ_0, at iteration 0): iterations 1-3 have the same pool, one block.
_LOAD_STATE = HFEngine._load_state
RUN = ["iterations=4", "pool.snapshot_every=4", "eval.every=100", "eval.seeded=false", "pipeline.overlap=false"]


def _train(tmp_path, tiny_overrides, monkeypatch, block: int) -> tuple[RunDir, list[str]]:
    loads: list[str] = []
    real = _LOAD_STATE  # not the last run's counter

    def counted(self, state, checkpoint_dir):
        loads.append(checkpoint_dir.parent.name + "/" + checkpoint_dir.name)
        return real(self, state, checkpoint_dir)

    monkeypatch.setattr(HFEngine, "_load_state", counted)
    cfg = load_config("tiny", tiny_overrides + RUN + [f"pipeline.seeds_block={block}"])
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
