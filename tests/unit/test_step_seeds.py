"""prefix.cut=steps: a seed ends after exactly `prefix.steps` complete lines of its draft, in the same
code path as cut=line (algo/seeding.seed_length), and a draft with fewer steps gives no seed: its slot
is on-policy (kind on_policy, no source) in the rollouts, so nothing is called seeded that is not."""

import pytest

from thinking_seeds.algo.seeding import cut_length, seed_length
from thinking_seeds.config import load_config

DRAFT = "8-5=3\n10*3=30\n30-6=24\n\\boxed{(10*(8-5))-6}"


def test_a_steps_cut_ignores_lambda_and_keeps_exactly_n_lines():
    pieces = list(DRAFT)
    ids = list(range(len(pieces)))
    for lam in (0.0, 0.2, 0.6, 1.0):  # λ is drawn but never read
        assert "".join(pieces[: cut_length(ids, lam, "steps", pieces, 1)]) == "8-5=3\n"
        assert "".join(pieces[: seed_length(ids, True, lam, "draft", 80, "steps", pieces, 2)]) == "8-5=3\n10*3=30\n"
    assert cut_length(ids, 0.5, "steps", pieces, 4) == 0  # the 4th line holds the answer: no seed
    one_line = list("\\boxed{8*3}\n")
    assert cut_length(list(range(len(one_line))), 0.5, "steps", one_line, 1) == 0  # the answer is no step
    assert cut_length([1, 2, 3], 0.5, "steps", ["8", "-", "5"], 1) == 0  # an unfinished line is no step
    comma = list("8,5=3\n")  # a comma inside a line is no step boundary (cut=line would stop there)
    assert cut_length(list(range(6)), 0.3, "steps", comma, 1) == 6
    assert cut_length(list(range(6)), 0.5, "line", comma, 1) == 2


def test_a_steps_cut_needs_the_texts_and_whole_drafts():
    with pytest.raises(ValueError, match="decoded text"):
        cut_length([1, 2], 0.5, "steps", None)
    with pytest.raises(ValueError, match="ratio_of='draft'"):
        seed_length([1, 2], True, 0.5, "budget", 80, "steps", ["1", "\n"])


def test_the_config_refuses_steps_with_budget_drafts_and_steps_without_the_cut():
    cfg = load_config("game24", ["prefix.cut=steps", "prefix.filter=correct_draft"])
    assert (cfg.prefix.cut, cfg.prefix.steps) == ("steps", 1)
    with pytest.raises(ValueError, match="prefix.ratio_of=draft"):
        load_config("game24", ["prefix.cut=steps", "prefix.ratio_of=budget"])
    with pytest.raises(ValueError, match="prefix.cut=steps"):
        load_config("game24", ["prefix.steps=2"])


def test_runs_hashed_before_the_steps_cut_keep_their_hash():
    """prefix.steps is out of the hash at its default, so every earlier run keeps its identity."""
    cfg = load_config("game24")
    assert "steps" not in cfg.hashed_settings()["prefix"]
    assert load_config("game24", ["prefix.cut=steps", "prefix.steps=2"]).hashed_settings()["prefix"]["steps"] == 2
