import math
from fractions import Fraction

import pytest
import torch

from thinking_seeds.algo.metrics import (
    avg_at_k,
    distinct_n,
    effective_entropy,
    masked_mean,
    pass_at_k,
    pass_at_k_curve,
    strategy_share,
    token_entropy,
)

torch.set_num_threads(1)


# --- pass@k / avg@k ---------------------------------------------------------


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (8, 3, 1, 3 / 8),  # pass@1 = c/n
        (4, 0, 3, 0.0),
        (4, 4, 1, 1.0),
        (4, 2, 3, 1.0),  # n - c < k: every 3-subset holds a correct one
    ],
)
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_exact_binomials_where_they_overflow_floats():
    n, c, k = 2000, 10, 500
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    with pytest.raises(OverflowError):  # the naive float ratio cannot even be formed
        float(math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)


@pytest.mark.parametrize(
    "n, c, k, message",
    [
        (4, 1, 5, r"1 <= k <= n, got k=5 with n=4"),
        (4, 1, 0, r"1 <= k <= n"),
        (4, 5, 1, r"0 <= c <= n, got n=4, c=5"),
        (0, 0, 1, r"n >= 1"),
    ],
)
def test_pass_at_k_rejects_impossible_arguments(n, c, k, message):
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


def test_pass_at_k_curve_averages_over_prompts():
    curve = pass_at_k_curve([1, 0, 4], n=4, ks=[1, 2, 4])
    assert list(curve) == [1, 2, 4]
    assert curve[1] == pytest.approx((0.25 + 0 + 1) / 3)
    assert curve[2] == pytest.approx((0.5 + 0 + 1) / 3)
    assert curve[4] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no prompts"):
        pass_at_k_curve([], n=4, ks=[1])


def test_avg_at_k_weighs_each_prompt_equally():
    assert avg_at_k([[1, 0], [1, 1, 1, 0]]) == pytest.approx((0.5 + 0.75) / 2)
    assert avg_at_k(torch.tensor([[1.0, 0.0], [0.0, 0.0]])) == pytest.approx(0.25)
    with pytest.raises(ValueError, match=r"prompts \[1\] have none"):
        avg_at_k([[1.0], []])


# --- entropy ----------------------------------------------------------------


def test_entropy_of_uniform_is_log_v():
    ent = token_entropy(torch.zeros(2, 3, 32))
    assert ent.shape == (2, 3)
    torch.testing.assert_close(ent, torch.full((2, 3), math.log(32)))


def test_entropy_by_hand_and_stable():
    # p = (.75, .25): -(.75 ln .75 + .25 ln .25)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert token_entropy(torch.tensor([math.log(3.0), 0.0])).item() == pytest.approx(h, abs=1e-6)
    # Huge logits overflow a naive exp; -inf logits (top-k masking) must not give NaN.
    assert token_entropy(torch.tensor([1000.0, 1000.0])).item() == pytest.approx(math.log(2), abs=1e-6)
    masked = token_entropy(torch.tensor([0.0, 0.0, -math.inf, -math.inf]))
    assert masked.item() == pytest.approx(math.log(2), abs=1e-6)
    assert token_entropy(torch.tensor([0.0, -math.inf])).item() == 0.0


def test_entropy_of_half_precision_is_computed_in_float32():
    ent = token_entropy(torch.zeros(4, 50, dtype=torch.bfloat16))
    assert ent.dtype == torch.float32
    torch.testing.assert_close(ent, torch.full((4,), math.log(50)))


def test_masked_mean_ignores_masked_nan_and_is_nan_when_empty():
    x = torch.tensor([[1.0, 2.0, math.nan], [4.0, 5.0, 6.0]])
    m = torch.tensor([[True, True, False], [False, False, True]])
    assert masked_mean(x, m).item() == pytest.approx(3.0)
    torch.testing.assert_close(masked_mean(x, m, dim=1), torch.tensor([1.5, 6.0]))
    assert math.isnan(masked_mean(x, torch.zeros_like(m)).item())
    with pytest.raises(ValueError, match="mask shape"):
        masked_mean(x, m[:, :2])


def test_effective_entropy_counts_only_unclipped_tokens_in_mask():
    entropy = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[True, True, True, False]])
    unclipped = torch.tensor([[True, False, True, True]])
    assert effective_entropy(entropy, mask, unclipped).item() == pytest.approx(2.0)  # (1 + 3) / 2
    assert math.isnan(effective_entropy(entropy, mask, torch.zeros_like(unclipped)).item())


# --- diversity --------------------------------------------------------------


def test_distinct_n_by_hand():
    assert distinct_n(["abab"], 2) == pytest.approx(2 / 3)  # ab, ba, ab
    assert distinct_n(["aaab"], 1) == pytest.approx(2 / 4)
    assert distinct_n([[1, 2, 3], [1, 2]], 2) == pytest.approx(2 / 3)  # token ids: (1,2) (2,3) (1,2)
    # Pooled over texts, not averaged per text: two identical texts halve it.
    assert distinct_n(["ab", "ab"], 2) == pytest.approx(0.5)
    assert math.isnan(distinct_n(["a", ""], 2))
    with pytest.raises(ValueError, match="n >= 1"):
        distinct_n(["ab"], 0)


def test_strategy_share():
    share = strategy_share(["a", "b", "a", "a"])
    assert share == {"a": 0.75, "b": 0.25}
    assert list(share) == ["a", "b"]
    assert strategy_share([]) == {}
