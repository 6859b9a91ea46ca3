"""maj@k with math-verify equivalence, avg@n / pass@k / maj@k per data source, and `ts eval`'s output shape."""

from __future__ import annotations

import json
import math

import pytest

from thinking_seeds.evals.benchmark import ScoredSample, benchmark_metrics, ks_upto, math_verify_pairs
from thinking_seeds.evals.majority import answer_classes, maj_at_k, majority_value


@pytest.fixture(scope="module")
def same():
    from thinking_seeds.data.rewards import Verifier

    with Verifier("math_verify", timeout_s=5.0) as v:
        yield math_verify_pairs(v)


def _strings(pairs):  # string equality: what maj@k must NOT use
    return [a == b for a, b in pairs]


def test_equivalent_answers_share_a_class(same):
    got = answer_classes([["1/2", "0.5", "3", None, "\\frac{1}{2}", " 3 "], ["x", None]], same)
    assert got == [[0, 0, 1, None, 0, 1], [0, None]]
    assert answer_classes([["1/2", "0.5"]], _strings) == [[0, 1]]


def test_maj_at_k_votes_by_equivalence_not_string(same):
    # ground truth 1/2: three equivalent correct answers in three spellings outvote two "3"s
    answers = ["3", "1/2", "0.5", "\\frac{1}{2}", "3"]
    correct = [0.0, 1.0, 1.0, 1.0, 0.0]
    (by_math,) = answer_classes([answers], same)
    (by_string,) = answer_classes([answers], _strings)
    assert maj_at_k(by_math, correct, 5) == 1.0
    assert maj_at_k(by_string, correct, 5) == 0.0  # "3" is the largest string class


def test_maj_at_k_hand_computed():
    classes, correct = [0, 0, 1, None], [1.0, 1.0, 0.0, 0.0]
    assert maj_at_k(classes, correct, 1) == pytest.approx(0.5)  # = the mean correctness
    # the 6 pairs: {0,1} {0,2}* {0,3} {1,2}* {1,3} -> 1 (ties* go to the class seen first), {2,3} -> 0
    assert maj_at_k(classes, correct, 2) == pytest.approx(5 / 6)
    assert maj_at_k(classes, correct, 4) == 1.0
    assert majority_value([0, 1], [0.0, 1.0], [1, 0]) == 0.0  # tie: sample order, not subset order
    assert majority_value([None, None], [1.0, 1.0], [0, 1]) == 0.0  # nobody answered: no vote
    # C(16, 8) > 1000 subsets: drawn, with a fixed seed -> the same number every time
    many = [i % 3 for i in range(16)]
    vals = [float(c == 0) for c in many]
    assert maj_at_k(many, vals, 8) == maj_at_k(many, vals, 8)
    assert 0.0 < maj_at_k(many, vals, 8) < 1.0 and maj_at_k(many, vals, 16) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= n"):
        maj_at_k(classes, correct, 5)


def _s(pid, src, answer, ok, reward=None):
    status = "ok" if ok else "wrong" if answer else "no_answer"
    return ScoredSample(pid, src, answer, float(ok) if reward is None else reward, status, 3)


def test_benchmark_metrics_per_source(same):
    n = 4
    samples = [
        # source a, prompt a-0: 2 of 4 correct, "0.5" and "1/2" vote together
        *[_s("a-0", "a", x, ok) for x, ok in [("1/2", True), ("0.5", True), ("7", False), (None, False)]],
        # a-1: none correct
        *[_s("a-1", "a", x, False) for x in ("2", "2", "3", "4")],
        # source b, b-0: all correct; a partial credit (0.1) is in avg@n but is not a solve
        *[_s("b-0", "b", x, True) for x in ("5", "5.0", "5")],
        _s("b-0", "b", "6", False, 0.1),
    ]
    out = benchmark_metrics(samples, n, same)
    a, b, all_ = out["by_source"]["a"], out["by_source"]["b"], out["metrics"]
    assert list(out["by_source"]) == ["a", "b"] and ks_upto(4) == [1, 2, 4]
    assert (a["prompts"], a["samples"], b["prompts"], all_["prompts"], all_["samples"]) == (2, 8, 1, 3, 12)
    assert isinstance(all_["prompts"], int) and all_["status"] == {"no_answer": 1, "ok": 5, "wrong": 6}
    assert a["avg@4"] == pytest.approx((0.5 + 0.0) / 2) and b["avg@4"] == pytest.approx(3.1 / 4)
    # pass@k = 1 - C(n-c, k)/C(n, k): a-0 (c=2): pass@1 .5, pass@2 1 - 1/6, pass@4 1
    assert a["pass@1"] == pytest.approx(0.25) and a["pass@2"] == pytest.approx((1 - 1 / 6) / 2)
    assert b["pass@1"] == pytest.approx(0.75) and b["pass@4"] == 1.0
    assert all_["pass@1"] == pytest.approx((0.5 + 0 + 0.75) / 3)
    # maj@4: a-0's {1/2, 0.5} beats {7} -> 1; a-1's "2" twice -> wrong; b-0's "5"/"5.0" -> 1
    assert a["maj@4"] == 0.5 and b["maj@4"] == 1.0 and all_["maj@4"] == pytest.approx(2 / 3)
    # maj@1 is the mean correctness
    assert all_["maj@1"] == pytest.approx(all_["pass@1"])
    with pytest.raises(ValueError, match="mix prompts"):
        benchmark_metrics(samples[1:] + samples[:1], n, same)
    assert math.isfinite(all_["mean_response_len"])
    json.dumps(out)  # plain JSON
