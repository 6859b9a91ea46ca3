"""The countdown (+/-) testbed: formats, the reasoning-gym checker on our answers, disjoint splits,
the warm-up corpus, the binary reward and the solution-pattern label."""

import json
import random
import re

import pytest

from thinking_seeds.data.builtin_tasks import get_task
from thinking_seeds.data.countdown import CHARSET, question, random_solution, signature, solution, valid_patterns
from thinking_seeds.data.countdown_data import build_countdown_splits, countdown_keys_of, countdown_warmup_corpus
from thinking_seeds.data.rewards import Verifier
from thinking_seeds.data.sources import load_dataset
from thinking_seeds.data.verdicts import last_boxed


def test_formats_and_patterns():
    assert question([19, 12, 7, 30], 54) == "Make 54 from 19,12,7,30."
    text = solution([(1, 19), (1, 12), (-1, 7), (1, 30)])
    assert text == "19+12=31,31-7=24,24+30=54. \\boxed{19+12-7+30}"
    assert set(text) <= set(CHARSET)
    # 1+2+3+4 = 10 has the all-plus pattern only; 10 from 5,5,10 has 5+5 and 10 (+5-5, -5+5, twice each)
    assert valid_patterns([1, 2, 3, 4], 10) == [(1, 1, 1, 1)]
    assert sorted(valid_patterns([5, 5, 10], 10)) == sorted([(1, -1, 1), (-1, 1, 1)])
    assert signature("19+12-7+30") == signature("30-7+19+12") == "+12+19+30-7"
    assert signature("19+12*7") is None and signature(None) is None
    with pytest.raises(ValueError, match="must start with an added number"):
        solution([(-1, 3), (1, 5)])


def test_random_solutions_are_valid_and_varied():
    rng = random.Random(0)
    numbers, target = [3, 8, 5, 2], 8  # 3+8-5+2 and 8+5-3-2: two sign patterns

    def expr(signs):  # an expression of a pattern, an added number first
        terms = sorted(zip(signs, numbers, strict=True), reverse=True)
        return str(terms[0][1]) + "".join(("+" if s > 0 else "-") + str(n) for s, n in terms[1:])

    pats = {signature(expr(p)) for p in valid_patterns(numbers, target)}
    seen_patterns, seen_orders = set(), set()
    for _ in range(200):
        text = random_solution(numbers, target, rng)
        expr = last_boxed(text)
        seen_orders.add(expr)
        seen_patterns.add(signature(expr))
    assert seen_patterns == pats and len(pats) >= 2
    assert len(seen_orders) > len(pats)  # orders vary too


def test_checker_accepts_any_valid_answer_and_binary_reward(tmp_path):
    paths = build_countdown_splits(tmp_path, train_size=0, val_size=0, test_size=6, seed=0)
    prompts = load_dataset(paths["test"])
    rng = random.Random(1)
    good, wrong_value = [], []
    for p in prompts:
        md = json.loads(p.rg_entry)["metadata"]
        good.append(random_solution(md["numbers"], md["target"], rng))
        wrong_value.append("\\boxed{" + "+".join(str(n) for n in md["numbers"]) + "}")  # right numbers, all added
    with Verifier(backend="reasoning_gym", partial_credit=False) as v:
        assert [x.reward for x in v.score_batch(good, prompts)] == [1.0] * 6
        binary = v.score_batch(wrong_value, prompts)
    with Verifier(backend="reasoning_gym", partial_credit=True) as v:
        partial = v.score_batch(wrong_value, prompts)
    for p, b, q in zip(prompts, binary, partial, strict=True):
        md = json.loads(p.rg_entry)["metadata"]
        if sum(md["numbers"]) != md["target"]:
            assert (b.reward, b.status) == (0.0, "wrong") and q.reward == pytest.approx(0.05)


def test_splits_disjoint_deterministic_and_warmup_excludes_held_out(tmp_path):
    a = build_countdown_splits(tmp_path / "a", train_size=60, val_size=20, test_size=20, seed=3)
    b = build_countdown_splits(tmp_path / "b", train_size=90, val_size=20, test_size=20, seed=3)
    keys = {s: countdown_keys_of(p) for s, p in a.items()}
    assert len(keys["train"]) == 60 and len(keys["test"]) == 20
    assert not (keys["train"] & keys["test"]) and not (keys["train"] & keys["validation"])
    assert a["test"].read_bytes() == b["test"].read_bytes()  # held-out splits do not move with train_size
    held_out = keys["test"] | keys["validation"]
    corpus = countdown_warmup_corpus(300, seed=3, exclude=held_out)
    assert len(corpus) == 300 and not ({q for q, _ in corpus} & {p.user_text for p in load_dataset(a["test"])})
    assert corpus == countdown_warmup_corpus(300, seed=3, exclude=held_out)
    for p in load_dataset(a["train"])[:5]:  # every row carries a valid worked solution (LUFFY, SFT control)
        md = json.loads(p.rg_entry)["metadata"]
        expr = last_boxed(p.target)
        assert valid_patterns(md["numbers"], md["target"]) and signature(expr) is not None
        assert sorted(int(x) for x in re.findall(r"\d+", expr)) == sorted(md["numbers"])
        assert eval(expr, {"__builtins__": {}}) == md["target"]  # digits and +/- only (signature checked it)


def test_task_label_is_the_pattern_of_correct_answers_only():
    label = get_task("countdown").label
    assert label("7+3=10. \\boxed{7+3}", 1.0) == "+3+7"
    assert label("7+3=10. \\boxed{7+3}", 0.0) is None
    with pytest.raises(ValueError, match="not a built-in task"):
        get_task("nope")
