"""The parts of checkpoint.every that need no run: the schedule, the background writer, CPU copies."""

from __future__ import annotations

import threading

import pytest
import torch

from thinking_seeds.config import load_config
from thinking_seeds.pipeline.policy_chain import checkpoint_due, memory_handoff
from thinking_seeds.store.checkpoints import FrozenModel, load_checkpoint, save_checkpoint
from thinking_seeds.store.optimizer_state import snapshot_optimizer
from thinking_seeds.train.resident import CheckpointWriter, metrics_digest
from thinking_seeds.transports import live_weights


def test_checkpoint_schedule_every_end_and_snapshots():
    cfg = load_config("tiny", ["iterations=12", "checkpoint.every=5", "pool.snapshot_every=4"])
    assert [s for s in range(13) if checkpoint_due(cfg, s)] == [0, 4, 5, 8, 10, 12]
    for other in ("update.launcher=accelerate_per_update", "model.lora.r=4"):
        c = load_config("tiny", ["iterations=12", "checkpoint.every=5", *other.split()])
        assert not memory_handoff(c) and all(checkpoint_due(c, s) for s in range(13))  # files, as before
    # vLLM takes θ through reload_weights(weights_iterator=...), fsdp2 from rank 0's gathered copy, Ray
    # workers from the object store: in memory, checkpoints on the schedule
    for other in ("rollout.engine=vllm", "update.strategy=fsdp2 update.num_processes=2", "cluster=ray"):
        v = load_config("tiny", ["iterations=12", "checkpoint.every=5", "pool.snapshot_every=4", *other.split()])
        assert memory_handoff(v) and [s for s in range(13) if checkpoint_due(v, s)] == [0, 4, 5, 8, 10, 12]


def test_checkpoint_every_is_not_in_the_config_hash():
    a, b = load_config("tiny", ["checkpoint.every=1"]), load_config("tiny", ["checkpoint.every=7"])
    assert a.config_hash() == b.config_hash()  # where θ is kept, not what it is


def test_metrics_digest_leaves_out_timings():
    a = {"actor/pg_loss": 0.25, "perf/fwd_bwd_s": 1.0, "checkpoint/replayed": 1.0}
    b = {"actor/pg_loss": 0.25, "perf/fwd_bwd_s": 2.0}
    assert metrics_digest(a) == metrics_digest(b) != metrics_digest({"actor/pg_loss": 0.26})


def test_background_writer_one_at_a_time_and_errors_surface():
    w, order, gate = CheckpointWriter(), [], threading.Event()
    w.submit(lambda: (gate.wait(5), order.append(1)), background=True)
    gate.set()
    w.submit(lambda: order.append(2), background=True)  # waits for the first
    w.wait()
    assert order == [1, 2]
    w.submit(lambda: 1 / 0, background=True)
    with pytest.raises(ZeroDivisionError):
        w.wait()
    w.wait()  # raised once


def test_frozen_copy_is_what_the_model_was(tmp_path):
    from tests.helpers.tiny import build_tiny_model

    model, tok = load_checkpoint_dir(build_tiny_model(tmp_path / "m"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    frozen, frozen_opt = FrozenModel(model), snapshot_optimizer(opt)
    want = {k: v.clone() for k, v in model.state_dict().items()}
    want_avg = opt.state_dict()["state"][0]["exp_avg"].clone()
    with torch.no_grad():  # the model trains on after the copy
        for p in model.parameters():
            p.add_(1.0)
    opt.step()
    path = save_checkpoint(frozen, tok, tmp_path / "policy", 1, optimizer=frozen_opt)
    back, _ = load_checkpoint(path)
    got = back.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert back.lm_head.weight.data_ptr() == back.model.embed_tokens.weight.data_ptr()  # still tied
    from safetensors.torch import load_file

    assert torch.equal(load_file(path / "optimizer.safetensors")["state.0.exp_avg"], want_avg)


def load_checkpoint_dir(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_live_weights_keyed_by_path_and_bounded(tmp_path):
    live_weights.clear()
    for s in range(3):
        live_weights.publish(tmp_path / f"step_{s}", f"id{s}", {"w": torch.zeros(1)})
    assert live_weights.lookup(tmp_path / "step_0") is None  # only the newest two are held
    assert live_weights.lookup(tmp_path / "step_2").policy_id == "id2"
    live_weights.clear(tmp_path)
    assert live_weights.lookup(tmp_path / "step_2") is None
