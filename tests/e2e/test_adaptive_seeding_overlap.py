"""prefix.when=on_failure with pipeline.overlap on: seeds k need θ_k's probe, so nothing is drafted ahead
beside update k-1 (stage_seeds.draft_ahead), and the run is the same as with overlap off (a full
tiny run more than tests/integration/test_adaptive_seeding.py, hence here)."""

from __future__ import annotations

from tests.helpers.resume import _assert_same_results
from tests.integration.test_adaptive_seeding import adaptive_run, overrides, reward_module  # noqa: F401
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.run_dir import RunDir


def test_overlap_on_gives_the_same_run(adaptive_run, tmp_path, tiny_model_dir, reward_module):  # noqa: F811
    run, cfg = adaptive_run
    assert cfg.pipeline.overlap is False
    on = load_config("tiny", overrides(tiny_model_dir, reward_module, "pipeline.overlap=true"))
    assert on.config_hash() == cfg.config_hash()  # scheduling, not what is computed
    other = train(RunDir.for_run("adaptive", tmp_path), on)
    for k in range(cfg.iterations):
        assert "perf/seeds_ahead" not in other.read_manifest(k, "seeds").metrics
    _assert_same_results(other, run, cfg.iterations)
