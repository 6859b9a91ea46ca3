"""Hand-computed checks of the policy loss (docs/algorithm.md §3): values, gradients, masks, statistics."""

import math

import pytest
import torch

from thinking_seeds.algo.losses import (
    LossInputs,
    LossSettings,
    aggregate,
    compute_policy_loss,
    kl_penalty,
    prefix_position_weights,
)


def make_inputs(logprobs, old=None, behaviour=None, adv=(1.0,), mask=None, prefix=None, seeded=None, entropy=None):
    lp = torch.tensor(logprobs, dtype=torch.float64, requires_grad=True)
    B, T = lp.shape
    return LossInputs(
        logprobs=lp,
        old_logprobs=torch.tensor(old if old is not None else logprobs, dtype=torch.float64),
        behaviour_logprobs=torch.tensor(behaviour if behaviour is not None else logprobs, dtype=torch.float64),
        advantages=torch.tensor(adv, dtype=torch.float64),
        response_mask=torch.tensor(mask if mask is not None else [[1] * T] * B, dtype=torch.bool),
        prefix_mask=torch.tensor(prefix if prefix is not None else [[0] * T] * B, dtype=torch.bool),
        seeded=torch.tensor(seeded if seeded is not None else [False] * B),
        entropy=None if entropy is None else torch.tensor(entropy, dtype=torch.float64),
    )


def grad_of(inp, s):
    out = compute_policy_loss(inp, s)
    out.loss.backward()
    return out, inp.logprobs.grad


LP2 = [[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]]
MASK2 = [[1, 1, 0], [1, 1, 1]]


def test_token_mean_equals_hand_sum():
    # ratio 1 everywhere: token loss is -A. (−1·2 + 2·3) / 5 tokens = 0.8
    inp = make_inputs(LP2, adv=[1.0, -2.0], mask=MASK2)
    out, g = grad_of(inp, LossSettings())
    assert out.loss.item() == pytest.approx(0.8)
    # d/dlp of -A·r = -A·r: -1/5 for row 0, +2/5 for row 1, 0 on padding.
    expected = torch.tensor([[-0.2, -0.2, 0.0], [0.4, 0.4, 0.4]], dtype=torch.float64)
    assert torch.allclose(g, expected)


@pytest.mark.parametrize(
    "mode,value",
    [("seq-mean-token-mean", (-1.0 + 2.0) / 2), ("seq-mean-token-sum-norm", (-2.0 / 3 + 6.0 / 3) / 2)],
)
def test_sequence_aggregations(mode, value):
    inp = make_inputs(LP2, adv=[1.0, -2.0], mask=MASK2)
    out = compute_policy_loss(inp, LossSettings(loss_agg_mode=mode))
    assert out.loss.item() == pytest.approx(value)


def test_clip_zeroes_gradient_outside_trust_region():
    # Positive advantage: ratio 1.5 > 1 + 0.28 is clipped (no gradient), ratio 1.1 is not.
    old = [[0.0, 0.0]]
    lp = [[math.log(1.5), math.log(1.1)]]
    inp = make_inputs(lp, old=old, adv=[1.0])
    out, g = grad_of(inp, LossSettings(clip_ratio_low=0.2, clip_ratio_high=0.28))
    assert g[0, 0].item() == 0.0
    assert g[0, 1].item() == pytest.approx(-1.1 / 2)
    assert out.stats.metrics()["actor/pg_clipfrac/on_policy"] == pytest.approx(0.5)


def test_clip_negative_advantage_low_side():
    # A < 0: ratio 0.5 < 1 - 0.2 is clipped; ratio 1.5 is not (the pessimistic branch keeps it).
    old = [[0.0, 0.0]]
    lp = [[math.log(0.5), math.log(1.5)]]
    inp = make_inputs(lp, old=old, adv=[-1.0])
    out, g = grad_of(inp, LossSettings())
    assert g[0, 0].item() == 0.0
    assert g[0, 1].item() == pytest.approx(1.5 / 2)
    assert out.stats.metrics()["actor/pg_clipfrac/all"] == pytest.approx(0.5)


def test_dual_clip_bounds_negative_advantage_loss():
    # A = -1, ratio 5, c = 3: loss is capped at -A·c = 3 and the gradient is zero.
    inp = make_inputs([[math.log(5.0)]], old=[[0.0]], adv=[-1.0])
    out, g = grad_of(inp, LossSettings(clip_ratio_c=3.0))
    assert out.loss.item() == pytest.approx(3.0)
    assert g.abs().sum().item() == 0.0
    # Without dual clip the loss is -A·r = 5 and the gradient is 5.
    inp = make_inputs([[math.log(5.0)]], old=[[0.0]], adv=[-1.0])
    out, g = grad_of(inp, LossSettings())
    assert out.loss.item() == pytest.approx(5.0)
    assert g.item() == pytest.approx(5.0)


def seeded_batch(**kw):
    # One seeded sample: 2 prefix tokens written by h, 2 continuation tokens by θ_old.
    # old_logprobs on the prefix are deliberately garbage: the loss must use behaviour there.
    return make_inputs(
        [[-1.0, -1.0, -1.0, -1.0]],
        old=[[-9.0, -9.0, -1.0, -1.0]],
        behaviour=kw.pop("behaviour", [[-1.0, math.log(0.25), 0.0, 0.0]]),
        adv=[1.0],
        prefix=[[1, 1, 0, 0]],
        seeded=[True],
        **kw,
    )


def test_context_prefix_gets_exactly_zero_gradient_and_leaves_the_mean():
    inp = seeded_batch()
    out, g = grad_of(inp, LossSettings(prefix_loss="context"))
    assert g[0, :2].abs().sum().item() == 0.0
    # Continuation: ratio 1, A = 1, token-mean over the 2 continuation tokens only.
    assert g[0, 2:].tolist() == pytest.approx([-0.5, -0.5])
    assert out.loss.item() == pytest.approx(-1.0)


def test_prefix_clip_uses_historical_policy_ratio():
    # Prefix token 0: π_θ/π_h = 1 -> gradient -A/N. Token 1: π_θ/π_h = e^-1/0.25 = 1.47 > 1.28 -> clipped.
    inp = seeded_batch()
    out, g = grad_of(inp, LossSettings(prefix_loss="clip"))
    assert g[0].tolist() == pytest.approx([-0.25, 0.0, -0.25, -0.25])
    m = out.stats.metrics()
    assert m["actor/pg_clipfrac/prefix"] == pytest.approx(0.5)
    assert m["actor/pg_clipfrac/continuation"] == pytest.approx(0.0)
    assert m["actor/ratio_max/prefix"] == pytest.approx(math.exp(-1) / 0.25)


def test_shaped_prefix_gradient():
    gamma = 0.1
    inp = seeded_batch()
    _, g = grad_of(inp, LossSettings(prefix_loss="shaped", shaped_gamma=gamma))
    p = math.exp(-1.0)
    # d/dlogp of -A·p/(p+γ) = -A·γ·p/(p+γ)², divided by the 4 tokens of the token-mean.
    expected = -gamma * p / (p + gamma) ** 2 / 4
    assert g[0, 0].item() == pytest.approx(expected)
    assert g[0, 1].item() == pytest.approx(expected)


def test_capped_prefix_bounds_but_keeps_gradient():
    # Prefix ratios: e^-1/e^-5 = e^4 (capped at 2) and 1 (under the cap).
    inp = seeded_batch(behaviour=[[-5.0, -1.0, 0.0, 0.0]])
    out, g = grad_of(inp, LossSettings(prefix_loss="capped", cap=2.0))
    assert g[0, :2].tolist() == pytest.approx([-2.0 / 4, -1.0 / 4])
    # Value: -(2 + 1 + 1 + 1) / 4
    assert out.loss.item() == pytest.approx(-5.0 / 4)
    assert out.stats.metrics()["actor/pg_clipfrac/prefix"] == 0.0


def test_prefix_position_weights_decay_linearly_along_each_prefix():
    # Row 0: a 4-token prefix -> 1, 3/4, 1/2, 1/4; row 1: a 2-token prefix -> 1, 1/2; off the prefix 1.
    w = prefix_position_weights(torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool))
    assert w.tolist() == [[1.0, 0.75, 0.5, 0.25, 1.0], [1.0, 0.5, 1.0, 1.0, 1.0], [1.0] * 5]


def test_position_prefix_loss_weighs_the_clip_term_by_depth():
    # Ratios 1 everywhere, A = 1, token-mean over 4 tokens: prefix token t of L = 3 gets -w(t)/4 with
    # w = 1, 2/3, 1/3; the continuation token keeps -1/4. Value: -(1 + 2/3 + 1/3 + 1) / 4 = -0.75.
    lp = [[-1.0, -1.0, -1.0, -1.0]]
    inp = make_inputs(lp, adv=[1.0], prefix=[[1, 1, 1, 0]], seeded=[True])
    out, g = grad_of(inp, LossSettings(prefix_loss="position"))
    assert g[0].tolist() == pytest.approx([-0.25, -1 / 6, -1 / 12, -0.25])
    assert out.loss.item() == pytest.approx(-0.75)
    # The clip still zeroes a prefix token whose ratio leaves the trust region (token 1: e^-1/0.25 > 1.28).
    out, g = grad_of(seeded_batch(), LossSettings(prefix_loss="position"))
    assert g[0].tolist() == pytest.approx([-0.25, 0.0, -0.25, -0.25])
    assert out.stats.metrics()["actor/pg_clipfrac/prefix"] == pytest.approx(0.5)
    # A negative advantage: the weight scales the push down the same way (1, then 1/2 of a 2-token prefix).
    inp = make_inputs([[-1.0, -1.0, -1.0]], adv=[-1.0], prefix=[[1, 1, 0]], seeded=[True])
    _, g = grad_of(inp, LossSettings(prefix_loss="position"))
    assert g[0].tolist() == pytest.approx([1 / 3, 1 / 6, 1 / 3])


def test_kl_estimators():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert kl_penalty(lp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(lp, ref, "k3").item() == pytest.approx(math.exp(-1.0) - 1.0 + 1.0)
    assert kl_penalty(lp, lp, "k3").item() == 0.0


def test_entropy_and_effective_entropy_by_population():
    # Two on-policy tokens, one of them clipped: effective entropy is the unclipped one's.
    inp = make_inputs([[math.log(1.5), 0.0]], old=[[0.0, 0.0]], adv=[1.0], entropy=[[2.0, 0.5]])
    out = compute_policy_loss(inp, LossSettings())
    m = out.stats.metrics()
    assert m["actor/entropy/on_policy"] == pytest.approx(1.25)
    assert m["actor/effective_entropy/on_policy"] == pytest.approx(0.5)


def test_global_normaliser_makes_microbatches_add_up():
    full = make_inputs(LP2, old=[[-1.1, -1.9, -3.0], [-0.4, -0.7, -0.5]], adv=[1.0, -2.0], mask=MASK2)
    out_full, g_full = grad_of(full, LossSettings())
    total = 0.0
    grads = []
    for i in range(2):
        part = make_inputs(
            [LP2[i]], old=[[[-1.1, -1.9, -3.0], [-0.4, -0.7, -0.5]][i]], adv=[[1.0, -2.0][i]], mask=[MASK2[i]]
        )
        out, g = grad_of(part, LossSettings(global_tokens=5.0))
        total += out.loss.item()
        grads.append(g)
    assert torch.allclose(torch.cat(grads), g_full)
    assert total == pytest.approx(out_full.loss.item())


def test_aggregate_rejects_unknown_mode():
    with pytest.raises(KeyError, match="unknown loss_agg_mode"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), LossSettings(loss_agg_mode="nope"))  # type: ignore[arg-type]


def test_effective_entropy_leaves_out_zero_advantage_tokens():
    # Sample 0 has A = 0 (its group's rewards were all equal): its tokens carry no gradient, so
    # they must not count in the effective entropy even though they are in the loss mask and
    # unclipped. Sample 1 (A = 1, unclipped) is the only one that counts.
    inp = make_inputs(
        [[0.0, 0.0], [0.0, 0.0]], old=[[0.0, 0.0], [0.0, 0.0]], adv=[0.0, 1.0], entropy=[[3.0, 3.0], [1.0, 0.5]]
    )
    m = compute_policy_loss(inp, LossSettings()).stats.metrics()
    assert m["actor/entropy/on_policy"] == pytest.approx(7.5 / 4)
    assert m["actor/effective_entropy/on_policy"] == pytest.approx(0.75)
    assert m["actor/grad_tokens/on_policy"] == pytest.approx(0.5)


def test_the_registry_holds_exactly_the_configs_built_in_prefix_losses():
    from thinking_seeds.algo.losses import SURROGATES
    from thinking_seeds.config.sections import PREFIX_LOSSES

    assert set(PREFIX_LOSSES) <= set(SURROGATES)
    assert [n for n in SURROGATES if ":" not in n and n not in PREFIX_LOSSES] == []


def test_loss_settings_come_from_the_config_by_name():
    from dataclasses import fields

    from thinking_seeds.config import load_config

    cfg = load_config("tiny", ["loss.clip_ratio_c=3.0", "prefix.loss=shaped", "prefix.shaped_gamma=0.3",
                               "loss.kl_coef=0.05", "loss.kl_type=k1", "rollout.max_new_tokens=40"])  # fmt: skip
    s = LossSettings.from_config(cfg, global_tokens=7.0)
    assert (s.clip_ratio_c, s.prefix_loss, s.shaped_gamma, s.kl_coef, s.kl_type) == (3.0, "shaped", 0.3, 0.05, "k1")
    assert (s.seq_norm_len, s.global_tokens, s.global_seqs) == (40.0, 7.0, None)
    for f in fields(LossSettings):  # every other field is the config's value of the same name
        if f.name not in ("prefix_loss", "seq_norm_len", "global_tokens", "global_seqs"):
            section = cfg.loss if hasattr(cfg.loss, f.name) else cfg.prefix
            assert getattr(s, f.name) == getattr(section, f.name), f.name


def halved_clip(logprobs, denom_logprobs, adv, s, prefix_mask):
    """A user's own prefix surrogate (by import path): half the clip term."""
    from thinking_seeds.algo.losses import clipped_surrogate

    loss, clipped = clipped_surrogate(logprobs, denom_logprobs, adv, s)
    return 0.5 * loss, clipped


def test_a_users_own_prefix_loss_by_import_path():
    from thinking_seeds.config import load_config

    path = "tests.unit.test_losses:halved_clip"
    assert load_config("tiny", [f"prefix.loss={path}"]).prefix.loss == path
    with pytest.raises(ValueError, match="neither a built-in"):
        load_config("tiny", ["prefix.loss=clipp"])
    with pytest.raises(ValueError, match="has no function"):
        load_config("tiny", ["prefix.loss=tests.unit.test_losses:nothing_here"])
    inp = make_inputs([[-1.0, -2.0, -0.5]], behaviour=[[-1.5, -1.0, -0.5]], prefix=[[1, 1, 0]], seeded=[True])
    _, g_clip = grad_of(inp, LossSettings(prefix_loss="clip"))
    inp = make_inputs([[-1.0, -2.0, -0.5]], behaviour=[[-1.5, -1.0, -0.5]], prefix=[[1, 1, 0]], seeded=[True])
    _, g_own = grad_of(inp, LossSettings(prefix_loss=path))
    torch.testing.assert_close(g_own[0, :2], 0.5 * g_clip[0, :2])  # the prefix tokens: half
    torch.testing.assert_close(g_own[0, 2:], g_clip[0, 2:])  # the continuation: unchanged
