"""prefix.when=on_failure's decisions (algo/adaptive_seeding.py) and its config, by hand."""

import math

import pytest

from thinking_seeds.algo.adaptive_seeding import (
    continued_drafts,
    failed_prompts,
    second_on_policy_slots,
    seeding_metrics,
)
from thinking_seeds.config import ConfigError, load_config


def test_a_prompt_fails_when_none_of_its_samples_is_correct():
    ids = ["a", "a", "b", "b", "c", "c"]
    # a: one correct; b: partial credit only (0.5 is not correct); c: none.
    assert failed_prompts(ids, [0.0, 1.0, 0.5, 0.5, 0.0, 0.0]) == ["b", "c"]
    assert failed_prompts(["z", "y"], [0.0, 0.0]) == ["z", "y"]  # first-seen order
    assert failed_prompts([], []) == []


def test_drafted_prompts_spend_their_seed_slots_on_drafts_the_others_on_policy():
    assert second_on_policy_slots(["a", "b", "c"], {"b"}, 4) == {"a": 4, "b": 0, "c": 4}


def test_seeding_metrics():
    drafts = [("b", 1.0, 10), ("b", 0.0, 20), ("c", 0.0, 30), ("c", 0.0, 40)]
    m = seeding_metrics(4, ["b", "c"], drafts, probe_tokens=123)
    assert m == {
        "seeding/failed_prompts_frac": 0.5,
        "seeding/seeded_prompts_frac": 0.25,  # only b has a correct draft
        "seeding/drafts": 4.0,
        "seeding/correct_draft_frac": 0.25,
        "seeding/draft_tokens": 100.0,
        "seeding/probe_tokens": 123.0,
    }
    assert math.isnan(seeding_metrics(4, [], [], 0)["seeding/correct_draft_frac"])


def test_on_failure_config_and_hash():
    base = load_config("tiny", [])
    on = load_config("tiny", ["prefix.when=on_failure", "prefix.filter=correct_draft"])
    assert base.prefix.when == "always"
    # Out of the hash at its default (tests/unit/test_archives_restorable.py: committed archives keep
    # their hashes); on_failure is another computation, so another hash.
    assert on.config_hash() != load_config("tiny", ["prefix.filter=correct_draft"]).config_hash()
    with pytest.raises(ConfigError, match="prefix.filter=correct_draft"):
        load_config("tiny", ["prefix.when=on_failure"])
    with pytest.raises(ConfigError, match="rollout.filter_groups"):
        load_config("tiny", ["prefix.when=on_failure", "prefix.filter=correct_draft", "rollout.filter_groups=true"])
    assert load_config("tiny", ["prefix.loss=position"]).prefix.loss == "position"


def test_continued_drafts_take_the_first_correct_ones_then_pad_with_wrong_ones():
    ids = ["a", "a", "a", "a", "b", "b", "b", "b"]
    rewards = [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert continued_drafts(ids, rewards, 2) == [1, 3, 4, 7]  # a: both correct; b: its one correct + first wrong
    assert continued_drafts(ids, rewards, 4) == list(range(8))  # as many drafts as slots: all, in draw order
    assert continued_drafts(["c", "c"], [None, 0.0], 1) == [0]  # an unscored (data-set) draft counts as correct


def test_failure_drafts_needs_the_probe():
    with pytest.raises(ConfigError, match="prefix.failure_drafts=3 drafts more"):
        load_config("tiny", ["prefix.failure_drafts=3"])
    cfg = load_config("tiny", ["algorithm=thinking_seeds_adaptive", "prefix.failure_drafts=3"])
    assert cfg.prefix.failure_drafts == 3
