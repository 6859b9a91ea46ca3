"""Token-budget micro-batches (update.max_tokens_per_micro_batch, update.packed): the grouping never
changes the gradient, because the loss is normalised by the mini-batch's global token and sequence
counts (algo/losses.py) -- the padded path's gradient to 1e-6 (fp32, a tiny random Qwen2), per
loss_agg_mode, with prefix tokens present, and the weights after several optimizer steps; and each
preset's default budget (token budgets are the default) against the padded path it replaced."""

from __future__ import annotations

import random

import pytest
import torch

from thinking_seeds.assets import PRESETS_DIR
from thinking_seeds.config import load_config
from thinking_seeds.engine.scoring import score_responses
from thinking_seeds.train.batch import Batch
from thinking_seeds.train.micro_batches import micro_batch_tokens, schedule
from thinking_seeds.train.packed_scoring import score_packed
from thinking_seeds.train.update_loop import train_on_batch

PAD = 0


def tiny_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=PAD,
    )
    return Qwen2ForCausalLM(cfg).float()


def spread_batch(model, n: int = 14, seed: int = 1) -> Batch:
    """Contexts of 3-10 tokens, responses of 0-30 (a wide spread), half of them seeded with a prefix,
    π_old near the model's own log-probs (ratios near, not at, 1), random advantages, and
    per-token rollout-correction weights on every third row."""
    rng = random.Random(seed)
    ctx = [[rng.randrange(1, 96) for _ in range(rng.randint(3, 10))] for _ in range(n)]
    resp = [[rng.randrange(1, 96) for _ in range(rng.choice([0, 2, 5, 9, 17, 30]))] for _ in range(n)]
    with torch.no_grad():
        lp = score_responses(model, ctx, resp, pad_id=PAD, with_entropy=False).logprobs
    old = [[float(lp[i, t]) + rng.uniform(-0.3, 0.3) for t in range(len(r))] for i, r in enumerate(resp)]
    beh = [[v + rng.uniform(-0.5, 0.5) for v in o] for o in old]
    seeded = [i % 2 == 0 and len(r) > 2 for i, r in enumerate(resp)]
    return Batch(
        contexts=ctx,
        responses=resp,
        old_logprobs=old,
        behaviour_logprobs=beh,
        prefix_len=[rng.randint(1, len(r) - 1) if s else 0 for s, r in zip(seeded, resp, strict=True)],
        seeded=seeded,
        advantages=[rng.uniform(-2, 2) for _ in range(n)],
        source_age=[rng.choice([0, 1, 3]) if s else -1 for s in seeded],
        # rollout-correction weights on some rows ([] = all 1): regrouping must carry them with their row
        token_weights=[[rng.uniform(0.5, 1.5) for _ in r] if i % 3 == 0 else [] for i, r in enumerate(resp)],
    )


def config(agg: str, extra: list[str] = ()):
    return load_config(
        "tiny",
        [
            f"loss.loss_agg_mode={agg}",
            "loss.entropy_coeff=0.01",
            "update.grad_clip=1e9",  # no clipping: the raw gradient is compared
            "update.launcher=in_process",
            "update.micro_batch_size=5",
            "update.max_tokens_per_micro_batch=null",  # padded: the reference (budgets are the default)
            *extra,
        ],
    )


def gradient(model, batch, cfg) -> dict[str, torch.Tensor]:
    """The accumulated gradient of one optimizer step of train_on_batch (an SGD step of lr 0 keeps θ)."""
    model.zero_grad(set_to_none=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    train_on_batch(model, batch, cfg, PAD, opt)
    return {n: p.grad.clone() for n, p in model.named_parameters()}


BUDGETS = [
    ["update.max_tokens_per_micro_batch=60"],  # several micro-batches; the 40-token ones alone
    ["update.max_tokens_per_micro_batch=1"],  # one sequence per micro-batch
    ["update.max_tokens_per_micro_batch=120", "update.packed=true"],
]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum-norm", "seq-mean-token-mean"])
def test_token_budget_gradient_equals_the_padded_one(agg):
    model = tiny_model()
    batch = spread_batch(model)
    assert any(batch.prefix_len)  # prefix tokens are in the loss (prefix.loss=clip)
    lengths = [(len(c), len(r)) for c, r in zip(batch.contexts, batch.responses, strict=True)]
    ref = gradient(model, batch, config(agg))
    assert any(float(g.abs().max()) > 1e-3 for g in ref.values())  # a gradient worth comparing
    for budget in BUDGETS:  # several micro-batches / one sequence each / packed rows
        cfg = config(agg, budget)
        ((_, micro),) = schedule(len(batch), cfg, 0, 0, 1, lengths=lengths, packed=cfg.update.packed)
        assert len(micro) > 1  # the budget really split the batch
        got = gradient(model, batch, cfg)
        for name in ref:
            torch.testing.assert_close(
                got[name], ref[name], rtol=0, atol=1e-6, msg=lambda m, n=name, b=budget: f"{b} {n}: {m}"
            )


def test_several_optimizer_steps_give_the_padded_weights():
    """update.mini_batches=3, two epochs: the same θ after six steps, padded or by token budget. SGD,
    whose step is linear in the gradient: AdamW's m/√v turns 1e-9 differences of near-zero gradient
    entries into lr-sized ones, which would test float noise, not the grouping."""
    model = tiny_model()
    batch = spread_batch(model, n=18)
    weights = []
    for extra in ([], BUDGETS[0], BUDGETS[2]):
        m = tiny_model()
        cfg = config("token-mean", ["update.mini_batches=3", "update.epochs=2", "update.lr=0.05", *extra])
        opt = torch.optim.SGD(m.parameters(), lr=cfg.update.lr)
        stats = train_on_batch(m, batch, cfg, PAD, opt)
        assert stats.metrics()["actor/optimizer_steps"] == 6
        weights.append({n: p.detach().clone() for n, p in m.named_parameters()})
    moved = max(float((weights[0][n] - p.detach()).abs().max()) for n, p in model.named_parameters())
    assert moved > 1e-3
    for other in weights[1:]:
        for n in weights[0]:
            torch.testing.assert_close(other[n], weights[0][n], rtol=0, atol=1e-6)


def test_packed_scores_equal_the_padded_ones():
    """One packed row (positions restarting, no mask) scores every response token as the padded batch."""
    model = tiny_model().eval()
    b = spread_batch(model)
    with torch.no_grad():
        a = score_responses(model, b.contexts, b.responses, pad_id=PAD)
        p = score_packed(model, b.contexts, b.responses)
    assert torch.equal(a.mask, p.mask)
    torch.testing.assert_close(p.logprobs, a.logprobs, rtol=0, atol=1e-6)
    torch.testing.assert_close(p.entropy * p.mask, a.entropy * a.mask, rtol=0, atol=1e-6)


def test_budget_groups_similar_lengths_within_the_budget_and_ranks_get_equal_counts():
    cfg = load_config("tiny", ["update.max_tokens_per_micro_batch=64", "update.mini_batches=2"])
    rng = random.Random(3)
    lengths = [(rng.randint(5, 12), rng.randint(0, 50)) for _ in range(41)]
    counts = []
    for rank in range(3):
        steps = schedule(41, cfg, 0, rank, 3, lengths=lengths)
        counts.append([len(micro) for _, micro in steps])
        for mini, micro in steps:
            real = [m for m in micro if m]
            assert sorted(i for m in real for i in m) == sorted(mini[rank::3])  # each sequence once
            for m in real:
                assert len(m) == 1 or micro_batch_tokens([lengths[i] for i in m], packed=False) <= 64
    assert counts[0] == counts[1] == counts[2]  # empty micro-batches pad the shorter plans


def test_the_padded_tokens_shrink():
    """The point of sorting: on a wide spread the padded micro-batches compute far fewer tokens."""
    cfg_fixed = load_config("tiny", ["update.micro_batch_size=8", "update.max_tokens_per_micro_batch=null"])
    cfg_budget = load_config("tiny", ["update.max_tokens_per_micro_batch=512"])
    rng = random.Random(5)
    lengths = [(rng.randint(20, 40), int(rng.lognormvariate(3.5, 0.8)) % 256) for _ in range(128)]

    def tokens(cfg):
        ((_, micro),) = schedule(128, cfg, 0, 0, 1, lengths=lengths)
        return sum(micro_batch_tokens([lengths[i] for i in m], packed=False) for m in micro)

    real = sum(c + r for c, r in lengths)
    assert tokens(cfg_budget) < 0.8 * tokens(cfg_fixed)
    assert tokens(cfg_budget) >= real


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["update.max_tokens_per_micro_batch=0"], "update.max_tokens_per_micro_batch: Input should be greater"),
        (
            ["update.packed=true", "update.max_tokens_per_micro_batch=null"],
            "update.packed=true packs each micro-batch's sequences into one row: set",
        ),
        (["update.strategy=zero"], "update.strategy: Input should be 'ddp' or 'fsdp2'"),
        (["update.strategy=fsdp2", "update.launcher=in_process"], "update.strategy=fsdp2 shards the model across"),
        (
            ["update.strategy=fsdp2"],
            "update.strategy=fsdp2 shards the model across trainer processes, and there is one",
        ),
        (
            ["update.strategy=fsdp2", "update.num_processes=2", "model.lora.r=4"],
            "update.strategy=fsdp2 shards a full fine-tune",
        ),
    ],
)
def test_bad_micro_batch_and_strategy_settings_are_one_line_errors(overrides, needle):
    from thinking_seeds.config import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config("tiny", overrides)
    assert needle in str(e.value)
    assert len(str(e.value).splitlines()) == 2  # the config's origin, then one line saying what to change


def test_new_settings_leave_existing_run_hashes_alone():
    padded = load_config("tiny", ["update.max_tokens_per_micro_batch=null"])  # the default before budgets
    same = load_config("tiny", ["update.max_tokens_per_micro_batch=null", "update.strategy=ddp", "update.packed=false"])
    assert padded.config_hash() == same.config_hash()
    assert "max_tokens_per_micro_batch" not in padded.hashed_settings()["update"]  # hashed as before the field
    assert load_config("tiny", ["update.max_tokens_per_micro_batch=512"]).config_hash() != padded.config_hash()
    assert load_config("tiny").config_hash() != padded.config_hash()  # the new default: another computation


PRESETS = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_defaults_to_a_token_budget_with_the_padded_gradient(preset):
    """Each preset's own budget (and the config default's) splits a batch of 64 spread sequences
    into several micro-batches, and its gradient is the padded path's to 1e-6."""
    from thinking_seeds.config import RunConfig

    assert RunConfig().update.max_tokens_per_micro_batch is not None
    common = ["loss.entropy_coeff=0.01", "update.grad_clip=1e9", "update.launcher=in_process", "update.mini_batches=1"]
    cfg = load_config(preset, common)
    assert cfg.update.max_tokens_per_micro_batch is not None, f"{preset} runs padded micro-batches by default"
    padded = load_config(preset, [*common, "update.max_tokens_per_micro_batch=null", "update.micro_batch_size=64"])
    model = tiny_model()
    batch = spread_batch(model, n=64)
    lengths = [(len(c), len(r)) for c, r in zip(batch.contexts, batch.responses, strict=True)]
    # the budget as the preset sets it, or a quarter of it: a split of this small batch either way
    small = cfg.model_copy(
        update={
            "update": cfg.update.model_copy(
                update={"max_tokens_per_micro_batch": cfg.update.max_tokens_per_micro_batch // 4}
            )
        }
    )
    ref = gradient(model, batch, padded)
    for budgeted in (cfg, small):
        ((_, micro),) = schedule(len(batch), budgeted, 0, 0, 1, lengths=lengths)
        assert micro and sorted(i for m in micro for i in m) == list(range(len(batch)))
        got = gradient(model, batch, budgeted)
        for name in ref:
            torch.testing.assert_close(
                got[name], ref[name], rtol=0, atol=1e-6, msg=lambda m, n=name: f"{preset} {n}: {m}"
            )
    ((_, micro),) = schedule(len(batch), small, 0, 0, 1, lengths=lengths)
    assert len(micro) > 1  # the quarter budget really split the batch
