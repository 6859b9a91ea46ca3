"""The update's log-probs and entropies through the LM head in chunks (engine/token_scores.py,
update.logprob_chunk_size): the gradient of every loss mode equals the plain path's (full logits) to
1e-6, padded and packed, in one chunk bitwise; and no tensor of (micro-batch tokens x vocabulary)
entries is ever made, forward or backward."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.unit.test_micro_batches import PAD, spread_batch, tiny_model
from thinking_seeds.config import load_config
from thinking_seeds.engine.scoring import score_responses
from thinking_seeds.engine.token_scores import chunk_tokens, supports_head_scores
from thinking_seeds.train.update_loop import train_on_batch

LOSS_MODES = [
    ["loss.loss_agg_mode=token-mean", "loss.entropy_coeff=0.01"],
    ["loss.loss_agg_mode=seq-mean-token-sum-norm", "prefix.loss=shaped"],
    ["loss.loss_agg_mode=seq-mean-token-mean", "prefix.loss=capped", "loss.entropy_coeff=0.05"],
    ["prefix.loss=context"],
    ["prefix.loss=position", "loss.clip_ratio_c=3.0"],
]


def gradient(model, batch, cfg, ref_model=None) -> dict[str, torch.Tensor]:
    """The accumulated gradient of one optimizer step (an SGD step of lr 0 keeps θ)."""
    model.zero_grad(set_to_none=True)
    train_on_batch(model, batch, cfg, PAD, torch.optim.SGD(model.parameters(), lr=0.0), ref_model=ref_model)
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def config(extra: list[str]):
    return load_config(
        "tiny",
        ["update.grad_clip=1e9", "update.launcher=in_process", "update.micro_batch_size=5", *extra],
    )


@pytest.mark.parametrize("mode", LOSS_MODES, ids=lambda m: ",".join(m))
def test_chunked_gradients_equal_the_full_logits_path(mode):
    model = tiny_model()
    batch = spread_batch(model)
    ref = gradient(model, batch, config([*mode, "update.logprob_chunk_size=null"]))
    assert any(float(g.abs().max()) > 1e-3 for g in ref.values())
    one_chunk = gradient(model, batch, config([*mode, "update.logprob_chunk_size=0"]))  # V=96: one chunk
    assert all(torch.equal(one_chunk[n], ref[n]) for n in ref)
    for extra in (["update.logprob_chunk_size=3"], ["update.logprob_chunk_size=7", "update.packed=true",
                                                    "update.max_tokens_per_micro_batch=120"]):  # fmt: skip
        got = gradient(model, batch, config([*mode, *extra]))
        for n in ref:
            torch.testing.assert_close(got[n], ref[n], rtol=0, atol=1e-6, msg=lambda m, n=n, e=extra: f"{e} {n}: {m}")


def test_the_kl_penalty_against_a_reference_model_is_unchanged():
    model, ref_model = tiny_model(), tiny_model()
    with torch.no_grad():
        for p in ref_model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    batch = spread_batch(model)
    plain = gradient(model, batch, config(["loss.kl_coef=0.1", "update.logprob_chunk_size=null"]), ref_model)
    got = gradient(model, batch, config(["loss.kl_coef=0.1", "update.logprob_chunk_size=4"]), ref_model)
    for n in plain:
        torch.testing.assert_close(got[n], plain[n], rtol=0, atol=1e-6)


class _Largest(TorchDispatchMode):
    """The largest tensor any op returns while active (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


def largest(model, ctx, resp, chunk):
    with _Largest() as probe:
        sc = score_responses(model, ctx, resp, pad_id=PAD, chunk_size=chunk)
        ((sc.logprobs * sc.mask).sum() + (sc.entropy * sc.mask).sum()).backward()
    return probe.numel


def test_no_tokens_by_vocabulary_tensor_is_made():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    V = 5000  # the vocabulary dominates every other tensor of this model
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=V,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=128,
            pad_token_id=PAD,
        )  # fmt: skip
    )
    ctx, resp = [[1, 2, 3]] * 4, [list(range(10, 50))] * 4  # 160 response tokens
    assert supports_head_scores(model)
    plain = largest(model, ctx, resp, None)
    chunked = largest(model, ctx, resp, 8)
    assert plain >= 4 * 40 * V  # the full logits (and their softmax, their gradient)
    assert chunked <= max(8 * V, V * 16)  # one chunk's logits, or the head's weight and its gradient
    assert chunk_tokens(151_936) == 55 and chunk_tokens(39) > 10_000 and chunk_tokens(39, 5) == 5


@pytest.fixture
def one_rank_group(tmp_path):
    """A one-process gloo group, as accelerate makes for DDP (destroyed after the test)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def vocab_model(V: int = 5000):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=V,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=128,
            pad_token_id=PAD,
        )  # fmt: skip
    )


def assert_no_vocabulary_tensor(model, V: int = 5000) -> None:
    """`model`'s chunked path (it holds vocab_model(V)) makes no (tokens x vocabulary) tensor."""
    ctx, resp = [[1, 2, 3]] * 4, [list(range(10, 50))] * 4  # 160 response tokens
    assert supports_head_scores(model), type(model)
    assert largest(model, ctx, resp, 8) <= V * 16, type(model)


def trainable_gradient(model, batch, cfg) -> dict[str, torch.Tensor]:
    """`gradient`, of the trainable parameters, by their names inside DDP (the model's own)."""
    model.zero_grad(set_to_none=True)
    params = [p for p in model.parameters() if p.requires_grad]
    train_on_batch(model, batch, cfg, PAD, torch.optim.SGD(params, lr=0.0))
    return {n.removeprefix("module."): p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def assert_ddp_gradient_is_plain(model) -> None:
    """The chunked path's gradient through DDP(model) equals the plain path's on the bare model."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    batch = spread_batch(model)
    ref = trainable_gradient(model, batch, config(["update.logprob_chunk_size=null"]))
    got = trainable_gradient(DDP(model), batch, config(["update.logprob_chunk_size=3"]))
    assert got.keys() == ref.keys() and any(float(g.abs().max()) > 1e-3 for g in ref.values())
    for n, g in got.items():
        torch.testing.assert_close(g, ref[n], rtol=0, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}")


def test_the_head_is_found_under_ddp(one_rank_group):
    """DDP (what update.num_processes >= 2 trains) hides the head behind its `.module`: the chunked path
    finds it there and makes no (tokens x vocabulary) tensor (was: the full logits, 24 bytes per entry),
    and its gradient through DDP's forward (and reducer) is the plain path's. peft: e2e/test_head_peft.py."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    assert_no_vocabulary_tensor(DDP(vocab_model()))
    assert_ddp_gradient_is_plain(tiny_model())
