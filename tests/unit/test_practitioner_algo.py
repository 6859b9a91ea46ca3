"""The pure math of issue #28's three features, against hand-computed values: rollout–trainer
correction weights (algo/rollout_correction.py), overlong handling (algo/overlong.py), dynamic
sampling's group rule (algo/dynamic_sampling.py), and the loss's per-token weight."""

import math

import pyarrow.parquet  # noqa: F401  (pa.parquet below)
import pytest
import torch

from thinking_seeds.algo.dynamic_sampling import informative_groups, round_quota
from thinking_seeds.algo.losses import LossInputs, LossSettings, compute_policy_loss
from thinking_seeds.algo.overlong import OverlongSettings, get_overlong, is_truncated, soft_penalty
from thinking_seeds.algo.rollout_correction import rollout_correction

# Two sequences, three positions; row 1 has two tokens. log π_trainer − log π_engine per token:
LR = torch.tensor([[0.5, -0.1, 0.2], [1.0, 0.3, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[True, True, True], [True, True, False]])
ENGINE = torch.zeros_like(LR)


def test_token_tis_truncates_each_token_at_the_cap():
    w, m = rollout_correction(LR, ENGINE, MASK, "token_tis", cap=1.7)
    want = torch.tensor([[math.exp(0.5), math.exp(-0.1), math.exp(0.2)], [1.7, math.exp(0.3), 1.0]])
    assert torch.allclose(w, want.double())
    assert m["rollout_corr/truncated_frac"] == pytest.approx(1 / 5)  # e^1.0 > 1.7 only
    assert m["rollout_corr/weight_max"] == pytest.approx(1.7)
    lr = torch.tensor([0.5, -0.1, 0.2, 1.0, 0.3], dtype=torch.float64)
    assert m["rollout_corr/kl_k1"] == pytest.approx(float(-lr.mean()))
    assert m["rollout_corr/kl_k3"] == pytest.approx(float((lr.exp() - 1 - lr).mean()))
    assert m["rollout_corr/log_ratio_abs_max"] == pytest.approx(1.0)


def test_seq_tis_and_seq_mask_use_the_sequence_product():
    w, m = rollout_correction(LR, ENGINE, MASK, "seq_tis", cap=2.0)
    assert torch.allclose(w[0], torch.full((3,), math.exp(0.6), dtype=torch.float64))  # e^0.6 = 1.82 < 2
    assert torch.allclose(w[1, :2], torch.full((2,), 2.0, dtype=torch.float64))  # e^1.3 = 3.67 -> 2
    assert w[1, 2] == 1.0  # padding keeps weight 1 (masked out of the loss anyway)
    assert m["rollout_corr/truncated_frac"] == pytest.approx(0.5)
    w, m = rollout_correction(LR, ENGINE, MASK, "seq_mask", cap=2.0)
    assert w[0, 0] == 1.0 and w[1, 0] == 0.0 and w[1, 1] == 0.0
    assert m["rollout_corr/masked_frac"] == pytest.approx(0.5)


def test_no_mismatch_is_the_identity():
    for mode in ("token_tis", "seq_tis", "seq_mask"):
        w, m = rollout_correction(ENGINE, ENGINE, MASK, mode, cap=2.0)
        assert torch.equal(w, torch.ones_like(w)) and m["rollout_corr/kl_k3"] == 0.0


def test_loss_token_weights_scale_each_tokens_surrogate_and_gradient():
    torch.manual_seed(0)
    lp = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    base = dict(
        old_logprobs=lp.detach() + 0.01,
        behaviour_logprobs=torch.zeros(2, 3, dtype=torch.float64),
        advantages=torch.tensor([1.0, -0.5], dtype=torch.float64),
        response_mask=MASK,
        prefix_mask=torch.zeros(2, 3, dtype=torch.bool),
        seeded=torch.tensor([False, False]),
    )
    w = torch.tensor([[2.0, 1.0, 0.5], [0.0, 1.0, 1.0]], dtype=torch.float64)
    s = LossSettings()
    plain = compute_policy_loss(LossInputs(logprobs=lp, **base), s).loss
    (g_plain,) = torch.autograd.grad(plain, lp)
    weighted = compute_policy_loss(LossInputs(logprobs=lp, token_weights=w, **base), s).loss
    (g_w,) = torch.autograd.grad(weighted, lp)
    assert torch.allclose(g_w, g_plain * w)  # token-mean: each token's gradient times its weight
    ones = compute_policy_loss(LossInputs(logprobs=lp, token_weights=torch.ones_like(w), **base), s).loss
    assert ones.item() == plain.item()


def test_overlong_soft_penalty_is_dapos_linear_buffer():
    s = OverlongSettings(max_len=20, buffer=4, penalty=1.0)
    L = torch.tensor([10, 16, 17, 18, 20, 25])
    assert soft_penalty(L, s).tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    r = torch.ones(6)
    shaped, carries = get_overlong("soft")(r, L, torch.zeros(6, dtype=torch.bool), s)
    assert shaped.tolist() == pytest.approx([1.0, 1.0, 0.75, 0.5, 0.0, 0.0]) and carries.all()


def test_overlong_mask_drops_truncated_samples_only():
    trunc = torch.tensor([True, False, True])
    shaped, carries = get_overlong("mask")(torch.ones(3), torch.tensor([5, 3, 5]), trunc, OverlongSettings(5))
    assert carries.tolist() == [False, True, False] and shaped.tolist() == [1.0, 1.0, 1.0]


def test_truncation_flag():
    assert is_truncated(5, False, 7, eos_id=2, max_len=5)  # the engine says it hit its cap
    assert not is_truncated(5, True, 2, eos_id=2, max_len=5)
    assert is_truncated(5, None, 7, eos_id=2, max_len=5)  # no engine flag: by length and EOS
    assert not is_truncated(5, None, 2, eos_id=2, max_len=5) and not is_truncated(4, None, 7, eos_id=2, max_len=5)


def test_informative_groups():
    got = informative_groups(["a", "a", "b", "b", "c"], [1.0, 0.0, 1.0, 1.0, 0.0])
    assert got == {"a": True, "b": False, "c": False}
    assert round_quota(4, 1) == 3 and round_quota(4, 5) == 0


def test_config_keys_of_issue_28():
    from thinking_seeds.config import load_config
    from thinking_seeds.config.loading import ConfigError

    plain = load_config("tiny", [])
    assert plain.update.recompute_old_logprobs is False
    on = load_config("tiny", ["loss.rollout_correction=seq_tis"])
    assert on.update.recompute_old_logprobs is True  # the correction needs the trainer's π_old
    with pytest.raises(ConfigError, match="needs the trainer's π_old"):
        load_config("tiny", ["loss.rollout_correction=token_tis", "update.recompute_old_logprobs=false"])
    # New keys hash only away from their defaults: runs started before them keep their stages.
    explicit = ["rollout.filter_groups=false", "reward.overlong=none", "loss.rollout_correction_cap=2.0"]
    assert load_config("tiny", explicit).config_hash() == plain.config_hash()
    assert load_config("tiny", ["reward.overlong=mask"]).config_hash() != plain.config_hash()


def test_rollouts_written_before_the_truncated_column_still_read(tmp_path):
    import pyarrow as pa

    from thinking_seeds.pipeline.rows import RolloutRow, read_rows
    from thinking_seeds.store.schemas import ROLLOUT_SCHEMA
    from thinking_seeds.train.trainer import load_batch

    row = dict(
        run_id="r",
        iteration=0,
        prompt_id="p",
        sample_id=0,
        kind="on_policy",
        source_step=None,
        prefix_len=0,
        prompt_token_ids=[1],
        token_ids=[2, 3],
        old_logprobs=[-0.1, -0.2],
        behaviour_logprobs=[0.0, 0.0],
        response_text="x",
        answer=None,
        status="wrong",
        reward=0.0,
        advantage=0.5,
    )
    old_schema = pa.schema([f for f in ROLLOUT_SCHEMA if f.name != "truncated"])
    path = tmp_path / "rollouts.parquet"
    pa.parquet.write_table(pa.Table.from_pylist([row], schema=old_schema), path)
    (r,) = read_rows(RolloutRow, path)
    assert r.truncated is None and r.advantage == 0.5
    assert load_batch(path).token_weights == [[]]
