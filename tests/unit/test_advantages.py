import math

import pytest
import torch

from thinking_seeds.algo.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_rloo_outcome_advantage,
    get_adv_estimator,
    register_adv_est,
)

torch.set_num_threads(1)


def t(xs, dtype=torch.float32):
    return torch.tensor(xs, dtype=dtype)


def idx(xs):
    return torch.tensor(xs, dtype=torch.long)


def mask(xs):
    return torch.tensor(xs, dtype=torch.bool)


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, t(expected), atol=atol, rtol=0)


# --- registry ---------------------------------------------------------------


def test_registry_has_the_three_estimators():
    assert {"grpo", "dr_grpo", "rloo"} <= set(ADVANTAGE_ESTIMATORS)
    assert get_adv_estimator("rloo") is compute_rloo_outcome_advantage


def test_unknown_estimator_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'gae'.*dr_grpo, grpo"):
        get_adv_estimator("gae")


def test_registering_a_taken_name_fails():
    with pytest.raises(ValueError, match="already registered"):

        @register_adv_est("grpo")
        def other(rewards, group_index, baseline_mask=None, epsilon=1e-6):
            return rewards


# --- grpo -------------------------------------------------------------------


def test_grpo_two_groups_by_hand():
    # group 0: mean .25, unbiased std .5 -> 1.5, -.5 ; group 1: mean .5, std sqrt(1/3) -> ±0.8660
    grpo = get_adv_estimator("grpo")
    adv = grpo(t([1, 0, 0, 0, 1, 1, 0, 0]), idx([0, 0, 0, 0, 1, 1, 1, 1]))
    h = 0.5 / math.sqrt(1 / 3)
    close(adv, [1.5, -0.5, -0.5, -0.5, h, h, -h, -h])
    assert adv.dtype == torch.float32


def test_grpo_groups_need_not_be_contiguous():
    adv = get_adv_estimator("grpo")(t([1, 5, 0, 5]), idx([7, 3, 7, 3]))
    s = 0.5 / math.sqrt(0.5)  # group 7: mean .5, std sqrt(.5)
    close(adv, [s, 0, -s, 0])


def test_grpo_on_policy_baseline_uses_only_on_policy_stats():
    # on-policy [0, 1, 0] -> mean 1/3, std sqrt(1/3); the seeded sample (r=1) is judged against them.
    rewards, group = t([0, 1, 0, 1]), idx([0, 0, 0, 0])
    on_policy = mask([True, True, True, False])
    s = math.sqrt(1 / 3)
    adv = get_adv_estimator("grpo")(rewards, group, on_policy)
    close(adv, [-(1 / 3) / s, (2 / 3) / s, -(1 / 3) / s, (2 / 3) / s])
    # The whole-group baseline differs (mean .5): the mask really changes the statistics.
    whole = get_adv_estimator("grpo")(rewards, group)
    h = 0.5 / s
    close(whole, [-h, h, -h, h])


def test_grpo_all_equal_rewards_give_zero():
    adv = get_adv_estimator("grpo")(t([0.1, 0.1, 0.1]), idx([0, 0, 0]))
    assert torch.equal(adv, torch.zeros(3))


def test_grpo_zero_spread_baseline_keeps_centred_signal():
    # on-policy all 0, the seed solved it: A = r - mean, not (r - mean) / eps.
    adv = get_adv_estimator("grpo")(t([0, 0, 0, 1]), idx([0, 0, 0, 0]), mask([True, True, True, False]))
    close(adv, [0, 0, 0, 1], atol=0)


def test_grpo_group_without_baseline_samples_uses_whole_group():
    # group 0 is all seeded: fall back to its own stats (mean .5, std sqrt(.5)).
    adv = get_adv_estimator("grpo")(t([1, 0, 1, 0]), idx([0, 0, 1, 1]), mask([False, False, True, True]))
    s = 0.5 / math.sqrt(0.5)
    close(adv, [s, -s, s, -s])


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_of_size_one_gets_zero(name):
    adv = get_adv_estimator(name)(t([1.0, 1, 0]), idx([0, 1, 1]))
    assert adv[0].item() == 0.0
    assert adv[1].item() > 0 > adv[2].item()


# --- dr_grpo ----------------------------------------------------------------


def test_dr_grpo_is_mean_centred_without_std():
    adv = get_adv_estimator("dr_grpo")(t([1, 0, 0, 0, 2, 4]), idx([0, 0, 0, 0, 1, 1]))
    close(adv, [0.75, -0.25, -0.25, -0.25, -1, 1])


def test_dr_grpo_on_policy_baseline():
    adv = get_adv_estimator("dr_grpo")(t([0, 1, 0, 1]), idx([0] * 4), mask([True, True, True, False]))
    close(adv, [-1 / 3, 2 / 3, -1 / 3, 2 / 3])


# --- rloo -------------------------------------------------------------------


def test_rloo_by_hand_and_verl_scaling():
    rewards = t([1, 0, 0, 0])
    adv = get_adv_estimator("rloo")(rewards, idx([0] * 4))
    close(adv, [1, -1 / 3, -1 / 3, -1 / 3])  # 1 - mean(0,0,0); 0 - mean(1,0,0)
    n = 4
    close(adv, (rewards * n / (n - 1) - rewards.mean() * n / (n - 1)).tolist())  # verl's form


def test_rloo_on_policy_baseline():
    # on-policy [0, 1, 0], seeded [1]: seeded baseline = mean(0,1,0); on-policy leave one out.
    adv = get_adv_estimator("rloo")(t([0, 1, 0, 1]), idx([0] * 4), mask([True, True, True, False]))
    close(adv, [0 - 0.5, 1 - 0.0, 0 - 0.5, 1 - 1 / 3])


def test_rloo_lone_baseline_sample_uses_rest_of_group():
    # on-policy [1] alone, seeded [0, 1]: the on-policy sample's baseline is mean(0, 1).
    adv = get_adv_estimator("rloo")(t([1, 0, 1]), idx([0] * 3), mask([True, False, False]))
    close(adv, [0.5, -1, 0])


def test_rloo_group_without_baseline_samples_uses_whole_group():
    adv = get_adv_estimator("rloo")(t([1, 0, 0]), idx([0] * 3), mask([False] * 3))
    close(adv, [1, -0.5, -0.5])


# --- input checks -----------------------------------------------------------


@pytest.mark.parametrize(
    "rewards, group, bmask, message",
    [
        (t([[1.0]]), idx([[0]]), None, "rewards must be a 1-D float tensor"),
        (t([1, 0]), idx([0]), None, "group_index must be an integer tensor"),
        (t([1, 0]), t([0, 0]), None, "group_index must be an integer tensor"),
        (t([1, 0]), idx([0, 0]), t([1, 1]), "baseline_mask must be a bool tensor"),
        (t([1, float("nan")]), idx([0, 0]), None, r"non-finite at sample indices \[1\]"),
    ],
)
def test_bad_inputs_fail_clearly(rewards, group, bmask, message):
    with pytest.raises(ValueError, match=message):
        get_adv_estimator("grpo")(rewards, group, bmask)
