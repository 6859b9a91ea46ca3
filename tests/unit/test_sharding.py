"""Shards of a generation call (engine/sharding.py) and the order-keeping fan-out (data/ray_pool.fan_out):
the cut does not depend on who runs it, shard 0 keeps the call's seed (one-batch calls sample as before),
results come back in request order, and an item whose worker died is retried, once."""

from __future__ import annotations

import pytest

from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.engine.rollout import Generation, HFEngine, SamplingParams
from thinking_seeds.engine.sharding import (
    LocalRollout,
    generate_sharded,
    generate_sharded_many,
    make_shards,
    shard_seed,
)


@pytest.fixture(scope="module")
def engine():
    tok = char_tokenizer("0123456789+-=ab\n")
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)
    ctx = [tok(t)["input_ids"] for t in ("1+2=", "34-5+6=", "7=", "8+9=", "10-1=", "2+2+2=", "5=", "6-6=", "9+0=")]
    return HFEngine(model, tok, batch_size=4), ctx


def test_shards_cut_in_order_with_their_own_seeds():
    params = SamplingParams(max_new_tokens=7, seed=123)
    shards = make_shards([[1]] * 10, params, None, 4)
    assert [(s.index, s.start, len(s.contexts)) for s in shards] == [(0, 0, 4), (1, 4, 4), (2, 8, 2)]
    assert shards[0].params.seed == 123  # a one-shard call samples as before shards existed
    assert len({s.params.seed for s in shards}) == 3 and shards[1].params.seed == shard_seed(123, 1)
    assert all(s.max_new == [7] * len(s.contexts) for s in shards)
    assert make_shards([[1]] * 3, params, [1, 2, 3], 2)[1].max_new == [3]
    with pytest.raises(ValueError, match="max_new has 2 entries for 3 contexts"):
        make_shards([[1]] * 3, params, [1, 2], 2)
    with pytest.raises(ValueError, match="shard_size"):
        make_shards([[1]], params, None, 0)


class _Backwards:
    """A runner that runs the shards last to first (as N workers might finish them)."""

    def run(self, checkpoint, shards, timer=None):
        out = {}
        for s in reversed(shards):
            out[s.index] = [Generation([s.start + i], [0.0], True) for i in range(len(s.contexts))]
        return [out[s.index] for s in shards]


def test_results_come_back_in_request_order():
    gens = generate_sharded(_Backwards(), "ckpt", [[1]] * 10, SamplingParams(), None, 3)
    assert [g.token_ids[0] for g in gens] == list(range(10))
    assert generate_sharded(_Backwards(), "ckpt", [], SamplingParams()) == []


def test_local_runner_is_the_engine_batch_by_batch(engine, tmp_path, monkeypatch):
    eng, ctx = engine
    monkeypatch.setattr(eng, "load_weights", lambda path: None)  # the weights in memory
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=5)
    sharded = generate_sharded(LocalRollout(eng), tmp_path, ctx, params, None, 4)
    by_hand = []
    for s in make_shards(ctx, params, None, 4):
        by_hand += eng.generate(s.contexts, s.params)
    assert [g.token_ids for g in sharded] == [g.token_ids for g in by_hand]
    # A call that fits one shard samples exactly what the engine samples for it.
    one = generate_sharded(LocalRollout(eng), tmp_path, ctx[:4], params, None, 4)
    assert [g.token_ids for g in one] == [g.token_ids for g in eng.generate(ctx[:4], params)]


def test_fan_out_keeps_order_and_retries_an_item_whose_worker_died():
    pytest.importorskip("ray")
    from ray.exceptions import RayActorError

    from thinking_seeds.data.ray_pool import fan_out

    class FakeRay:
        """Refs are (actor, item) pairs; ray.wait hands back the newest first; actor 0 dies once."""

        died = False

        def wait(self, refs, num_returns=1):
            return [refs[-1]], refs[:-1]

        def get(self, ref):
            actor, item = ref
            if actor == 0 and not FakeRay.died:
                FakeRay.died = True
                raise RayActorError()
            return item * 10

    calls = []

    def submit(actor, item):
        calls.append((actor, item))
        return (actor, item)

    out, retried = fan_out(FakeRay(), [0, 1], submit, list(range(5)), retries=2)
    assert out == [0, 10, 20, 30, 40] and retried == 1
    assert sorted(item for _, item in calls) == [0, 0, 1, 2, 3, 4]  # exactly one item ran twice

    class AlwaysDead(FakeRay):
        def get(self, ref):
            raise RayActorError()

    from thinking_seeds.data.ray_died import RayWorkerDied

    with pytest.raises(RayWorkerDied, match=r"died on shard 0 \(tried 3 times\)"):
        fan_out(AlwaysDead(), [0], submit, [1], retries=2)


def test_where_work_runs_is_not_hashed_and_workers_need_a_cluster():
    from thinking_seeds.config import RunConfig

    local = RunConfig()
    ray = RunConfig(
        cluster={"kind": "ray", "address": "10.0.0.1:6379", "worker_cpus": 0.5},
        rollout={"workers": 8, "worker_gpus": 1.0},
        reward={"workers": 4},
    )
    assert ray.config_hash() == local.config_hash()  # a run resumes on or off a cluster
    assert RunConfig(rollout={"batch_size": 8}).config_hash() != local.config_hash()  # the shards are hashed
    assert RunConfig(cluster="ray").cluster.kind == "ray"  # cluster=ray: short for {kind: ray}
    with pytest.raises(ValueError, match="rollout.workers=2 needs cluster=ray"):
        RunConfig(rollout={"workers": 2})


class _Recording:
    """An engine that records its calls; each token encodes (checkpoint, seed, row): what it was asked for."""

    def __init__(self, batches: bool) -> None:
        self.batches_checkpoints = batches
        self.calls: list[tuple] = []
        self.loaded = None

    def load_weights(self, checkpoint):
        self.loaded = str(checkpoint)
        self.calls.append(("swap", str(checkpoint)))

    def _gens(self, ck, contexts, params, max_new):
        return [Generation([hash((ck, params.seed, i, m)) & 0xFFFF], [0.0], True) for i, m in enumerate(max_new)]

    def generate(self, contexts, params, max_new=None):
        self.calls.append(("generate", len(contexts)))
        return self._gens(self.loaded, contexts, params, max_new)

    def generate_many(self, jobs):
        self.calls.append(("generate_many", len(jobs)))
        return [self._gens(str(ck), c, p, m) for ck, c, p, m in jobs]


def test_many_calls_in_one_engine_call_keep_shards_and_seeds():
    """generate_sharded_many = generate_sharded per call (same shards, seeds, order), a shard group per
    engine call when the engine serves several checkpoints at once (vLLM with LoRA adapters per request,
    the HF engine's stacked weights), else call by call."""
    calls = [
        ("ck0", [[1]] * 5, SamplingParams(max_new_tokens=4, seed=1), None),
        ("ck1", [[2]] * 2, SamplingParams(max_new_tokens=4, seed=2), [1, 3]),
        ("ck2", [], SamplingParams(seed=3), None),
    ]
    one, swaps = _Recording(True), _Recording(False)
    batched = generate_sharded_many(LocalRollout(one), calls, shard_size=2)
    looped = generate_sharded_many(LocalRollout(swaps), calls, shard_size=2)
    by_call = [generate_sharded(LocalRollout(_Recording(False)), *c, shard_size=2) for c in calls]
    assert [[g.token_ids for g in x] for x in batched] == [[g.token_ids for g in x] for x in by_call]
    assert [[g.token_ids for g in x] for x in looped] == [[g.token_ids for g in x] for x in by_call]
    assert [len(x) for x in batched] == [5, 2, 0]
    # shard i of every call in one engine call (sharding.shard_groups): ck0's 3 shards beside ck1's 1
    assert one.calls == [("generate_many", 2), ("generate_many", 1), ("generate_many", 1)]
    assert [c for c in swaps.calls if c[0] == "swap"] == [("swap", "ck0"), ("swap", "ck1")]


def test_shard_groups_hold_shard_i_of_every_call():
    from thinking_seeds.engine.sharding import shard_groups

    plans = [("a", [1, 2, 3]), ("b", []), ("c", [1]), ("d", [1, 2])]
    assert shard_groups(plans) == [[(0, 0), (2, 0), (3, 0)], [(0, 1), (3, 1)], [(0, 2)]]
    assert shard_groups([]) == []
    # keyed (a block of iterations' seeds, keyed by iteration): only calls of one key share a group
    assert shard_groups(plans, [1, 1, 2, 2]) == [[(0, 0)], [(0, 1)], [(0, 2)], [(2, 0), (3, 0)], [(3, 1)]]
