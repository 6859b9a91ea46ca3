"""`make demo` shows history: the demo preset's snapshot schedule gives its historical pool at least two
snapshots before its last seeds stage, so its seeds come from at least two source ages. A pure config
computation (the pool's own membership rule on the schedule's snapshots); no training."""

from __future__ import annotations

from pathlib import Path

from thinking_seeds.config import load_config
from thinking_seeds.store.checkpoint_format import CheckpointInfo
from thinking_seeds.store.historical_pool import HistoricalPool


def _pool_before(cfg, k: int) -> list[int]:
    """The steps of the pool members a seeds stage of iteration k drafts from (snapshot j joins the pool at
    iteration j and is historical from j + 1 on: stage_snapshot.py, HistoricalPool.members)."""
    snapshots = [
        CheckpointInfo(Path(f"step_{j}"), j, "", 0, {})
        for j in range(cfg.iterations)
        if j % cfg.pool.snapshot_every == 0
    ]
    pool = HistoricalPool(cfg.pool.size, cfg.pool.include_initial, cfg.pool.pick)
    return [c.step for c in pool.members(snapshots, current_step=k)]


def test_the_demo_pool_holds_several_snapshots_before_its_last_seeds_stage():
    cfg = load_config("demo")
    assert cfg.rollout.seeds_per_group > 0 and cfg.prefix.source == "historical"
    last = cfg.iterations - 1  # the last iteration's seeds stage
    members = _pool_before(cfg, last)
    assert len(members) >= 2, members
    assert members[0] == 0 and members == sorted(members)  # θ_0 stays (include_initial) beside later snapshots
    # with a uniform pick every member writes seeds: at least two source ages in that one iteration
    assert cfg.pool.pick == "uniform" and len({last - m for m in members}) >= 2
    # and history shows for a good part of the run, not only at its end
    assert sum(len(_pool_before(cfg, k)) >= 2 for k in range(cfg.iterations)) >= cfg.iterations // 2


def test_the_countdown_schedule_would_not_have_shown_it():
    """The rule the test above relies on catches the old demo: snapshots every 20 over 20 iterations."""
    cfg = load_config("demo", ["pool.snapshot_every=20"])
    assert _pool_before(cfg, cfg.iterations - 1) == [0]
