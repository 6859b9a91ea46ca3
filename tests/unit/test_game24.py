"""The 24 game (thinking_seeds.data.game24): the problem space counted by enumeration, exact
arithmetic, chain-step solutions, partial answers, splits disjoint by multiset, and the checker."""

import json
from fractions import Fraction

import pytest

from thinking_seeds.data import game24 as g


def test_the_problem_space_is_1820_multisets_of_which_1362_make_24():
    assert len(g.all_multisets()) == 1820 == len(set(g.all_multisets()))
    assert len(g.solvable_multisets()) == 1362
    assert g.solvable([3, 3, 8, 8])  # needs a fraction: 8/(3-8/3)
    assert not g.solvable([1, 1, 1, 1])


def test_every_solvable_multiset_has_a_chain_with_non_negative_steps_and_each_chain_is_valid():
    for numbers in ([3, 3, 8, 8], [8, 5, 10, 6], [1, 2, 3, 4], [12, 12, 12, 12]):
        sols = g.solutions(numbers)
        assert sols and len(sols) == len(set(sols))
        for s in sols:
            st = g.partial_state(numbers, s + "\n")
            assert st.steps_ok and st.remaining == (Fraction(24),) and len(st.steps) == 3
    assert len(g.solutions([1, 2, 3, 4])) > 10  # diverse targets for the warm-up
    assert g.solutions([1, 1, 1, 1]) == []


def test_a_chain_answer_boxes_the_composed_expression():
    text = g.chain_text([8, 3, 8, 3], "8/3=8/3\n3-(8/3)=1/3\n8/(1/3)=24")
    assert text.endswith("\\boxed{8/(3-(8/3))}")
    assert set(text) <= set(g.CHARSET)
    with pytest.raises(ValueError, match="not a complete chain"):
        g.chain_text([8, 3, 8, 3], "8/3=8/3")


def test_a_partial_answer_leaves_a_subproblem_that_is_reachable_or_dead():
    live = g.partial_state([8, 5, 10, 6], "8-5=3\n")
    assert live.steps_ok and live.reachable and live.remaining == (3, 6, 10)
    dead = g.partial_state([8, 5, 10, 6], "10+8=18\n5-1=4")  # the unfinished line does not count
    assert dead.steps_ok and not dead.reachable and dead.remaining == (5, 6, 18)
    assert not g.partial_state([1, 1, 1, 1], "").reachable
    # a step on a number that is not available, or with wrong arithmetic, is no valid prefix
    assert not g.partial_state([8, 5, 10, 6], "7+1=8\n").steps_ok
    assert not g.partial_state([8, 5, 10, 6], "8+5=14\n").steps_ok
    # a zero denominator written by the model (seen in a game24 run's corpus) is an invalid step, not a crash
    zero = g.partial_state([8, 5, 10, 6], "8-5=3\n(8/0)+3=3\n")
    assert not zero.steps_ok and zero.remaining == (3, 6, 10)
    assert not g.partial_state([8, 5, 10, 6], "8*5=8/0\n").steps_ok
    bad = g.partial_state([8, 8, 3, 3], "8/3=8/3\n3-(8/3)=1/3\n")
    assert bad.reachable and bad.remaining == (Fraction(1, 3), 8)


def test_the_diversity_label_is_order_free():
    assert g.canonical("(8-5)*(10-6)") == g.canonical("(10-6)*(8-5)")
    assert g.canonical("(1+2+3)*4") == g.canonical("4*(3+(2+1))")
    assert g.canonical("8/(3-8/3)") != g.canonical("8/(3-3/8)")
    assert g.canonical("8**2") is None and g.canonical("8+") is None


def test_splits_are_disjoint_by_multiset_and_train_is_the_rest(tmp_path):
    from thinking_seeds.data.game24_data import build_game24_splits
    from thinking_seeds.data.sources import load_dataset

    paths = build_game24_splits(tmp_path, 10_000, 128, 256, seed=1234)
    keys = {}
    for split, p in paths.items():
        rows = load_dataset(p)
        keys[split] = {tuple(sorted(json.loads(r.rg_entry)["metadata"]["numbers"])) for r in rows}
        assert len(keys[split]) == len(rows)
    assert [len(keys[s]) for s in ("train", "validation", "test")] == [978, 128, 256]
    assert not (keys["train"] & keys["validation"] or keys["train"] & keys["test"] or keys["validation"] & keys["test"])
    again = build_game24_splits(tmp_path / "b", 100, 128, 256, seed=1234)  # train size does not move held-out
    assert load_dataset(again["test"])[0].rg_entry == load_dataset(paths["test"])[0].rg_entry


def test_the_warmup_corpus_draws_only_training_multisets():
    from thinking_seeds.data.countdown_data import problem_key
    from thinking_seeds.data.game24_data import game24_warmup_corpus

    held = {problem_key(list(m), 24) for m in g.solvable_multisets()[5:]}
    pairs = game24_warmup_corpus(50, 0, held)
    assert {tuple(sorted(int(x) for x in q[len("Make 24 from ") : -1].split(","))) for q, _ in pairs} <= set(
        g.solvable_multisets()[:5]
    )


def test_our_checker_refuses_what_puzzle24s_scorer_accepts():
    """reasoning-gym's countdown checker (what game24 rows are scored with) refuses an answer that
    does not use the given numbers and one that is 24.5; puzzle24's scorer (0.1.25) accepts both."""
    rg = pytest.importorskip("reasoning_gym")
    from thinking_seeds.data.verifier_worker import _score_reasoning_gym

    countdown = rg.get_score_answer_fn("countdown")

    def ours(answer, numbers):
        return _score_reasoning_gym(
            answer, countdown, json.dumps({"metadata": {"numbers": numbers, "target": 24}}), False
        )[0]

    assert ours("6*4*1*1", [8, 5, 10, 6]) == 0.0  # not the given numbers
    assert ours("7*7/2*1", [7, 7, 2, 1]) == 0.0  # 24.5
    assert ours("8/(3-(8/3))", [3, 3, 8, 8]) == 1.0  # exact fractions
    assert ours("(10-6)*(8-5)*2", [8, 5, 10, 6]) == 0.0
    puzzle24 = rg.get_score_answer_fn("puzzle24")
    assert puzzle24("6*4*1*1", {"metadata": {"numbers": [8, 5, 10, 6]}}) == 1.0
    assert puzzle24("7*7/2*1", {"metadata": {"numbers": [7, 7, 2, 1]}}) == 1.0


def test_game24_is_a_builtin_task_with_the_countdown_checker():
    from thinking_seeds.config import load_config
    from thinking_seeds.data.builtin_tasks import get_task

    task = get_task("game24")
    assert task.reward == "reasoning_gym" and task.charset == g.CHARSET
    assert task.label("10-6=4\n8-5=3\n4*3=12\n\\boxed{(8-5)*(10-6)}", 1.0) == g.canonical("(10-6)*(8-5)")
    assert task.label("\\boxed{(8-5)*(10-6)}", 0.0) is None
    cfg = load_config("game24")
    assert (cfg.data.source, cfg.data.train_size, cfg.model.path) == ("game24", 489, "builtin:tiny-game24-v2")
    with pytest.raises(ValueError, match="reasoning-gym's own checkers"):
        load_config("game24", ["reward.backend=math_verify"])


def test_the_splits_and_solutions_the_bundled_base_was_built_on_are_pinned(tmp_path):
    """The held-out splits and every solution chain are a contract with `builtin:tiny-game24-v2` (built
    and checked on them). Pinned from the Fraction-based search, so a faster search (integer pairs) or
    any other rewrite must give the very same multisets, rows and 15,645 chains."""
    import hashlib

    from thinking_seeds.data.game24_data import build_game24_splits
    from thinking_seeds.data.sources import load_dataset

    assert sum(len(g.solutions(m)) for m in g.solvable_multisets()) == 15645
    paths = build_game24_splits(tmp_path, 489, 128, 256, 1234)
    want = {"validation": "8b0d545f1cb595f0", "test": "04e4a5be74aa22b7", "train": "bd62f79632515584"}
    for split, digest in want.items():
        rows = load_dataset(paths[split])
        ms = [sorted(json.loads(r.rg_entry)["metadata"]["numbers"]) for r in rows]
        assert hashlib.sha256(json.dumps(ms).encode()).hexdigest()[:16] == digest, split
    assert json.loads(load_dataset(paths["validation"])[0].rg_entry)["answer"] == "(12*5)*(2/5)"
    assert json.loads(load_dataset(paths["test"])[0].rg_entry)["answer"] == "8*(10-(5+2))"
