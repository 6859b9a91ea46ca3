"""thinking_seeds.algo.stats: declared reductions, tensors until logged, and across processes the
statistics of the union of every process's tokens (SUM of sums and counts, MAX, MIN)."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from stats_driver import TEST_METRICS, batch, shard, stats_of

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
    _assert_union(got, stats_of(whole).metrics(), halves)


def _assert_union(got: dict, union: dict, halves: list[Stats]) -> None:
    assert got.keys() == union.keys()
    for name, want in union.items():
        kind = reduction_of(name)
        if kind == "mean":  # float32 sums over different token orders: equal to rounding
            assert got[name] == pytest.approx(want, rel=1e-6, abs=1e-7), name
        else:  # max, min and integer sums are exact
            assert got[name] == want, name
    assert got["test/sequences"] == 7.0
    assert "actor/prefix_abs_log_ratio/age=1" in got  # recorded by one half only
    # The data are discriminating: each half has its own token count, so a mean of the two halves'
    # means (the old reduction) misses the union's mean, and the mean of maxima misses the maximum.
    per_half = [h.metrics() for h in halves]
    assert per_half[0]["actor/grad_tokens/all"] != per_half[1]["actor/grad_tokens/all"]
    old_mean = (per_half[0]["actor/ratio_mean/all"] + per_half[1]["actor/ratio_mean/all"]) / 2
    assert not math.isclose(old_mean, union["actor/ratio_mean/all"], rel_tol=1e-4)
    old_max = (per_half[0]["actor/ratio_max/all"] + per_half[1]["actor/ratio_max/all"]) / 2
    assert old_max < union["actor/ratio_max/all"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_gloo_processes_log_the_statistics_of_the_union(tmp_path, subprocess_env, test_metrics):
    """Two CPU processes (accelerate + gloo, as the update launcher runs them) see different
    sequences; the logged mean, max, min and sum are those of the whole batch in one process."""
    out = tmp_path / "metrics.json"
    driver = Path(__file__).resolve().parent / "stats_driver.py"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--multi_gpu",
        "--main_process_port",
        str(_free_port()),
        str(driver),
        str(out),
    ]
    proc = subprocess.run(cmd, env=subprocess_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    whole = batch()
    halves = [stats_of(shard(whole, r, 2)) for r in range(2)]
    _assert_union(json.loads(out.read_text()), stats_of(whole).metrics(), halves)


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
