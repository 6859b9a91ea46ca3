"""thinking_seeds.algo.stats: declared reductions, tensors until logged, and across processes the
statistics of the union of every process's tokens (SUM of sums and counts, MAX, MIN). The reducer
here by hand; across two gloo processes: e2e/test_stats_gloo.py."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.stats_driver import TEST_METRICS, assert_union, batch, shard, stats_of
from thinking_seeds.algo.stats import METRICS, Stats, pack, reduction_of, unpack


@pytest.fixture
def test_metrics(monkeypatch):
    """Declare the driver's sum and min metrics for this test only."""
    for name, kind in TEST_METRICS.items():
        monkeypatch.setitem(METRICS, name, kind)


def test_every_name_has_one_declared_reduction():
    assert reduction_of("actor/ratio_max/prefix") == "max"
    assert reduction_of("actor/ratio_mean/prefix") == "mean"  # a parent by path segments, not by string prefix
    assert reduction_of("actor/prefix_abs_log_ratio/age=2-4") == "mean"
    with pytest.raises(KeyError, match="'actor/made_up' has no declared reduction"):
        reduction_of("actor/made_up")
    s = Stats()
    with pytest.raises(ValueError, match="mean metric: pass a count"):
        s.add("actor/pg_loss", 1.0)
    with pytest.raises(ValueError, match="max metric: pass no count"):
        s.add("actor/ratio_max/all", 1.0, 3)


def test_statistics_stay_float64_tensors_and_match_python_sums():
    """No float() per entry: tensors until metrics(); float64 gives what summing Python floats gave."""
    g = torch.Generator().manual_seed(1)
    xs = [torch.rand(50, generator=g, dtype=torch.float32) for _ in range(20)]
    s = Stats()
    for x in xs:
        s.add("actor/entropy/all", x.sum(), torch.tensor(50))
        s.add("actor/ratio_max/all", x.max())
    kept = [*s.totals.values(), *s.counts.values(), *s.extremes.values()]
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in kept)
    total = 0.0
    for x in xs:
        total += float(x.sum())  # the old Stats.add
    m = s.metrics()
    assert m["actor/entropy/all"] == total / 1000.0  # bit for bit
    assert m["actor/ratio_max/all"] == max(float(x.max()) for x in xs)


def test_empty_populations_are_left_out():
    s = Stats()
    s.add("actor/pg_clipfrac/prefix", torch.tensor(0), torch.tensor(0))
    s.add("actor/ratio_max/prefix", torch.tensor(float("-inf")))
    s.add("actor/pg_clipfrac/all", torch.tensor(1), torch.tensor(4))
    assert s.metrics() == {"actor/pg_clipfrac/all": 0.25}


def test_packed_halves_reduce_to_the_statistics_of_the_union(test_metrics):
    """The reducer without processes: pack each half over the union's names, SUM and MAX by hand."""
    whole = batch()
    halves = [stats_of(shard(whole, r, 2)) for r in range(2)]
    names = sorted({n for h in halves for n in h.names()})
    packed = [pack(h, names, torch.device("cpu")) for h in halves]
    additive = packed[0][0] + packed[1][0]
    extreme = torch.maximum(packed[0][1], packed[1][1])
    got = unpack(names, torch.cat([additive, extreme]).tolist())
    assert_union(got, stats_of(whole).metrics(), halves)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_recording_statistics_never_waits_for_the_gpu(test_metrics):
    """The loss and every Stats.add run with CUDA's sync debugger set to raise; metrics() syncs once."""
    whole = batch()
    cuda = type(whole)(**{k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in vars(whole).items()})
    torch.cuda.set_sync_debug_mode("error")
    try:
        stats = stats_of(cuda, seeded_rows=torch.nonzero(whole.seeded).flatten().tolist())
        stats.add("actor/grad_norm", torch.linalg.vector_norm(cuda.logprobs), 1)
        stats.add("actor/optimizer_steps", 1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    got = stats.metrics()
    want = stats_of(whole).metrics()
    assert got.keys() - {"actor/grad_norm", "actor/optimizer_steps"} == want.keys()
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
