"""No work repeated across ranks (train/update_loop.py), on two gloo processes under accelerate's DDP:
each rank scores π_old for its own micro-batches only and every rank ends with the whole batch's
scores (those of one process); DDP all-reduces once per optimizer step, not once per micro-batch; and
the chunked LM head through the DDP wrapper gives one process's gradient (the all-reduce saw the head).
The ranks: tests/helpers/rank_work.py. Slow: two spawned processes importing torch and transformers."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

from tests.helpers.rank_work import SETS, run_rank
from tests.unit.test_micro_batches import PAD, spread_batch, tiny_model
from tests.unit.test_token_scores import config
from thinking_seeds.train.update_loop import recompute_old_logprobs, train_on_batch

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("rank-work")
    mp.spawn(run_rank, args=(2, _port(), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def one_process():
    """π_old, the engine-difference metrics and the last step's gradient of the same batch in one process."""
    model, cfg = tiny_model(), config(SETS)
    batch = spread_batch(model)
    diff = recompute_old_logprobs(model, batch, cfg, PAD)
    train_on_batch(model, batch, cfg, PAD, torch.optim.SGD(model.parameters(), lr=0.0))
    return batch.old_logprobs, diff, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_each_rank_scores_only_its_own_micro_batches(ranks, one_process):
    old, diff, _ = one_process
    for r in ranks:
        assert sorted(r["scored"]) == sorted(r["own"]) and len(set(r["scored"])) == len(r["scored"])
    assert not set(ranks[0]["scored"]) & set(ranks[1]["scored"])
    assert sorted(ranks[0]["scored"] + ranks[1]["scored"]) == list(range(len(old)))
    for r in ranks:  # gathered: every rank holds the whole batch's π_old, as one process computes it
        for got, ref in zip(r["old_logprobs"], old, strict=True):
            torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=0, atol=1e-5)
        assert r["diff"].keys() == diff.keys() and r["diff"] == ranks[0]["diff"]
        for k, v in diff.items():
            assert r["diff"][k] == pytest.approx(v, rel=1e-4), k


def test_ddp_all_reduces_once_per_optimizer_step(ranks):
    for r in ranks:
        steps, buckets = len(r["micro_per_step"]), len(set(r["reduces"]))
        assert steps == 4 and all(n == 2 for n in r["micro_per_step"]), r["micro_per_step"]  # 2 per step
        assert len(r["reduces"]) == steps * buckets, (r["reduces"], r["micro_per_step"])


def test_the_chunked_head_through_ddp_gives_one_process_gradient(ranks, one_process):
    _, _, ref = one_process
    assert all(r["chunked"] for r in ranks)
    for name, g in ref.items():
        assert torch.equal(ranks[0]["grads"][name], ranks[1]["grads"][name]), name  # all-reduced
        torch.testing.assert_close(ranks[0]["grads"][name], g, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
