"""The persistent trainer hands θ to the engine in the engine's dtype: under update.mixed_precision=bf16
the fp32 masters cross the socket as bf16 (half the bytes), equal to what the bf16 engine would make of
the fp32 tensors; in process, and when the dtypes agree, the trainer's own tensors go (no copy)."""

import socket
import threading
from types import SimpleNamespace

import torch

from tests.unit.test_micro_batches import tiny_model
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.trainer_client import PersistentTrainer
from thinking_seeds.train.resident import Resident
from thinking_seeds.transports.weights import send_weights, weights_header


def _resident(model) -> Resident:
    res = Resident(None)
    res.state = SimpleNamespace(model=model, gathered=None)
    return res


def test_the_engine_dtype_is_bf16_only_where_precision_differs():
    assert load_config("tiny").engine_dtype == "float32"
    assert load_config("tiny", ["update.mixed_precision=bf16"]).engine_dtype == "bfloat16"


def test_the_hand_over_is_cast_to_the_engine_dtype_and_arrives_as_sent():
    model = tiny_model()
    res = _resident(model)
    own = res.weights()
    assert all(own[k].data_ptr() == t.data_ptr() for k, t in model.state_dict().items())  # no copy
    same = res.weights(torch.float32)
    assert all(same[k].data_ptr() == own[k].data_ptr() for k in own)  # nothing to cast: the same storage
    out = res.weights(torch.bfloat16)
    assert {t.dtype for t in out.values()} == {torch.bfloat16}
    header = weights_header(out)
    sent_bytes = sum(t.numel() * 2 for t in out.values())
    a, b = socket.socketpair()
    with a.makefile("wb") as fa, b.makefile("rb") as fb:
        sender = threading.Thread(target=send_weights, args=(fa, out))
        sender.start()
        got = PersistentTrainer.receive_weights(SimpleNamespace(file=fb), header, "test")
        sender.join()
    a.close()
    b.close()
    assert sum(t.numel() * t.element_size() for t in got.values()) == sent_bytes  # half of fp32's
    engine = tiny_model().to(torch.bfloat16)  # the engine's bf16 copy of θ
    engine.load_state_dict(own)  # what it made of the fp32 tensors before
    for name, t in engine.state_dict().items():
        assert torch.equal(got[name], t), name


def test_the_hand_over_sends_each_tensor_once_in_order_whatever_its_layout():
    """send_weights' staging (a tensor's host copy queued before the previous one is written): the bytes
    arrive in the header's order, non-contiguous, tied and 0-d tensors included."""
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    state = {"a": base.t(), "b": torch.ones(5, dtype=torch.bfloat16), "tied": base.t(), "c": torch.tensor(7.0)}
    header = weights_header(state)
    assert [h[0] for h in header] == ["a", "b", "c"]
    a, b = socket.socketpair()
    b.settimeout(60)  # a sender that fails must not hang the test
    with a.makefile("wb") as fa, b.makefile("rb") as fb:
        sender = threading.Thread(target=send_weights, args=(fa, state))
        sender.start()
        got = PersistentTrainer.receive_weights(SimpleNamespace(file=fb), header, "test")
        sender.join()
    a.close()
    b.close()
    assert got.keys() == {"a", "b", "c"} and all(torch.equal(got[k], state[k]) for k in got)
