"""pipeline.overlap (seeds k+1 sampled while update k runs: pipeline/seeds_ahead.py) and
prefix.ratio_of=budget (drafts stopped at their cut), on the tiny run.

- the plain loop with overlap off ends with the same weights, rollouts, prefixes and evaluation as
  the shared tiny run (overlap on: the default on the CPU), whose seeds 1 really were sampled ahead;
- seeds sampled ahead by other pool members than the stage's are not used;
- the seeds stage with ratio_of=budget keeps the same tokens and log-probs as ratio_of=draft up to
  the draft mode's cut, never cuts shorter, and samples fewer draft tokens.

Kill -9 and resume with overlap on (plain loop and Prefect, in-process and the persistent
trainer): e2e/test_overlap.py.
"""

from __future__ import annotations

from tests.helpers.resume import _assert_same_results
from tests.helpers.tiny import TINY_RUN_ID, copy_run
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.pipeline.rows import PrefixRow, read_rows
from thinking_seeds.pipeline.seeds_ahead import Ahead, overlap_due, overlap_on, put_ahead, take_ahead
from thinking_seeds.pipeline.session import Session
from thinking_seeds.pipeline.stage_seeds import seeds
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir


def test_overlap_on_and_off_give_the_same_run(tiny_run, tmp_path):
    """The reference tiny run has the default (unset: on, on the CPU); this one has it off."""
    assert tiny_run.cfg.pipeline.overlap is None and overlap_on(tiny_run.cfg)
    cfg = load_config("tiny", tiny_run.overrides + ["pipeline.overlap=false"])
    assert cfg.config_hash() == tiny_run.cfg.config_hash()  # scheduling, not what is computed
    run = train(RunDir.for_run(TINY_RUN_ID, tmp_path), cfg)
    ahead = tiny_run.run.read_manifest(1, "seeds").metrics
    assert ahead.get("perf/seeds_ahead") == 1.0, "the reference sampled nothing ahead"
    assert "perf/seeds_ahead" not in run.read_manifest(1, "seeds").metrics
    _assert_same_results(run, tiny_run.run, 2)
    for k in range(2):  # the same seeds' metrics too (the timings aside)
        got, want = (r.read_manifest(k, "seeds").metrics for r in (run, tiny_run.run))
        assert got == {n: v for n, v in want.items() if n != "perf/seeds_ahead"}


def test_overlap_is_on_where_it_was_measured_unless_set(tiny_run):
    cfg = tiny_run.cfg
    assert overlap_on(cfg.model_copy(update={"device": "cpu"}))
    vllm = cfg.model_copy(deep=True)
    vllm.rollout.engine = "vllm"
    ray = cfg.model_copy(deep=True)
    ray.cluster.kind = "ray"
    assert overlap_on(vllm) and not overlap_on(ray)  # vLLM on the CPU: measured too (BENCHMARKS.md)
    off = load_config("tiny", ["pipeline.overlap=false"])
    assert not overlap_on(off) and not overlap_due(off, 0)
    on = load_config("tiny", ["pipeline.overlap=true", "iterations=3"])
    assert [overlap_due(on, k) for k in range(3)] == [True, True, False]  # no iteration after the last
    assert not overlap_due(load_config("tiny", ["algorithm=grpo", "pipeline.overlap=true"]), 0)  # no seeds


def test_seeds_sampled_ahead_by_other_pool_members_are_not_used(tiny_run, tmp_path):
    run = copy_run(tiny_run.run, tmp_path)
    s = Session(run, tiny_run.cfg)
    _, members = s.pool_members(1)
    stale = Ahead(rows=[], members=((0, (("model.safetensors", "0" * 64),)),), seconds={})
    put_ahead(s, 1, stale)
    assert take_ahead(s, 1, members) is None
    assert take_ahead(s, 1, members) is None  # taken once


def test_budget_seeds_keep_the_draft_tokens_up_to_the_cut(tiny_run, tmp_path):
    """ratio_of=budget (the default since issue 53: the tiny run's) against ratio_of=draft on
    iteration 1 of a copy of the tiny run: every seed starts with the seed the draft mode cut from
    the same draft (same tokens, behaviour log-probs equal to float rounding) and is at most ⌊λ·T⌋ long; the drafts stop
    there, so fewer tokens are sampled, and none is scored."""
    cfg = load_config("tiny", tiny_run.overrides)
    assert cfg.prefix.ratio_of == "budget"
    run = copy_run(tiny_run.run, tmp_path)
    s = Session(run, load_config("tiny", tiny_run.overrides + ["prefix.ratio_of=draft"]))
    try:
        m = seeds(s, 1)
    finally:
        s.close()
    got = read_rows(PrefixRow, tiny_run.run.prefixes(1))
    want = read_rows(PrefixRow, run.root / m.outputs["prefixes"])
    T = cfg.rollout.max_new_tokens
    assert [r.seed_id for r in got] == [r.seed_id for r in want]
    longer = 0
    for b, d in zip(got, want, strict=True):
        n = len(d.prefix_token_ids)
        assert b.prefix_token_ids[:n] == d.prefix_token_ids
        # the two batches shed their finished rows at other steps: other float rounding, the same tokens
        assert all(abs(x - y) < 1e-5 for x, y in zip(b.behaviour_logprobs[:n], d.behaviour_logprobs, strict=True))
        assert n <= len(b.prefix_token_ids) <= int(b.prefix_ratio * T)
        assert b.draft_reward is None and b.draft_len <= d.draft_len
        longer += len(b.prefix_token_ids) > n
    assert longer, "no draft ran past its budget: the check would be vacuous"
    assert sum(r.draft_len for r in got) < sum(r.draft_len for r in want)
    assert read_table(run.prefixes(1)).num_rows == len(want)  # the copy holds the draft-mode seeds
