"""fsdp2's pieces on two gloo processes (train/strategy.py): θ_k is read by rank 0 alone and broadcast
into the other rank's meta parameters, which then trains bit for bit as a rank that read the whole
checkpoint; the optimizer state comes along; a gather without the optimizer and in bf16 gives rank 0 the
bf16 weights only; under update.mixed_precision=bf16 the all-gathered parameters are bf16."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from tests.helpers.fsdp2_ranks import _batch, run_rank
from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.store.checkpoints import OPTIMIZER_NAME
from thinking_seeds.store.optimizer_state import save_optimizer_state

# Two spawned processes (torch, transformers and a gloo group each): ~40 s idle, more on a loaded machine,
# so with the other multi-process tests (tests/e2e/test_fsdp2.py) out of the default run.
pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A tiny tied-embedding Llama after one AdamW step, with its optimizer state beside it."""
    path = tmp_path_factory.mktemp("fsdp2-ckpt")
    tok = char_tokenizer("0123456789+-=ab\n")
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = _batch(model.config.vocab_size, 7)
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    save_optimizer_state(opt, path / OPTIMIZER_NAME)
    return path


@pytest.fixture(scope="module")
def cases(ckpt, tmp_path_factory):
    """Two gloo ranks, started once, run: load_sharded (meta), every rank reading the checkpoint (full),
    and load_sharded under update.mixed_precision=bf16; [case][rank] -> what the rank saw."""
    out = tmp_path_factory.mktemp("fsdp2-ranks")
    todo = [("meta", []), ("full", []), ("meta", ["update.mixed_precision=bf16"])]
    mp.spawn(run_rank, args=(2, str(ckpt), str(out), _port(), todo), nprocs=2, join=True)
    return [[torch.load(out / f"case{i}-rank{r}.pt", weights_only=False) for r in range(2)] for i in range(len(todo))]


def tiny_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)


def test_rank0_loads_and_broadcasts_and_trains_as_full_loads(cases, ckpt):
    meta, full, _ = cases
    assert meta[1]["meta_before_shard"] and not meta[0]["meta_before_shard"]  # only rank 0 held the weights
    for r in meta:
        assert r["tied"] and 0.45 < r["fraction"] < 0.6
        assert r["chunked_head"]  # the update's LM head in chunks under fsdp2 too (engine/token_scores.py)
        assert r["opt_steps"] and set(r["opt_steps"]) == {1.0}  # the checkpoint's AdamW state came along
    # What the load put in place is the checkpoint's AdamW state, on either path.
    names = [n for n, _ in tiny_model(ckpt).named_parameters()]
    saved = load_file(str(ckpt / OPTIMIZER_NAME))
    for path in (meta, full):
        for i, name in enumerate(names):
            for k in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(path[0]["loaded_adam"][name][k], saved[f"state.{i}.{k}"]), (name, k)
    for name, t in full[0]["weights"].items():
        assert torch.equal(meta[0]["weights"][name], t), name
    for name, s in full[0]["adam"].items():
        assert set(s) == {"step", "exp_avg", "exp_avg_sq"}
        for k, v in s.items():
            assert torch.equal(meta[0]["adam"][name][k], v), (name, k)
    # The hand-over gather: bf16 weights, no optimizer state.
    assert meta[0]["light_opt"] is None
    for name, t in meta[0]["weights"].items():
        assert meta[0]["light"][name].dtype == torch.bfloat16
        assert torch.equal(meta[0]["light"][name], t.to(torch.bfloat16)), name
    assert meta[0]["compute_dtype"] == "torch.float32"


def test_bf16_mixed_precision_all_gathers_bf16_parameters(cases):
    bf16 = cases[2]
    assert bf16[0]["compute_dtype"] == bf16[1]["compute_dtype"] == "torch.bfloat16"
    assert all(t.dtype == torch.float32 for t in bf16[0]["weights"].values())  # fp32 masters
