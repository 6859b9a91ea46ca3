"""Test helper: reduce update statistics across two gloo processes (a script, not collected), and
the check of its result, `assert_union` (imported by the tests).

    accelerate launch --multi_gpu --num_processes 2 tests/helpers/stats_driver.py OUT.json

Each process takes every 2nd sequence of one fixed batch (as the trainer shards a mini-batch), so
the processes see different sequences, different token counts, and the prefix population on one
process only. Each computes the loss statistics of its shard plus a sum and a min metric, reduces
them with `Stats.metrics(across_processes=True)`, and process 0 writes the result to OUT.json.
tests/e2e/test_stats_gloo.py compares it with the statistics of the whole batch in one process.
"""

from __future__ import annotations

import json
import math
import sys

import torch

from thinking_seeds.algo.losses import LossInputs, LossSettings, compute_policy_loss
from thinking_seeds.algo.stats import METRICS, Stats, reduction_of

# Test-only metrics: the loss declares no sum or min metric, the reducer supports both.
TEST_METRICS = {"test/sequences": "sum", "test/logprob_min": "min"}


def batch(n: int = 7, t: int = 9) -> LossInputs:
    """A fixed batch: (n, t) tensors; sequence i has 2 + i % 7 response tokens, odd ones are seeded."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([2 + i % 7 for i in range(n)])
    resp = torch.arange(t)[None, :] < lengths[:, None]
    seeded = torch.arange(n) % 2 == 1
    prefix = (torch.arange(t)[None, :] < 2) & seeded[:, None] & resp
    old = -torch.rand(n, t, generator=g) * 2
    return LossInputs(
        logprobs=old + torch.randn(n, t, generator=g) * 0.4,
        old_logprobs=old,
        behaviour_logprobs=old + torch.randn(n, t, generator=g) * 0.8,
        advantages=torch.randn(n, generator=g),
        response_mask=resp,
        prefix_mask=prefix,
        seeded=seeded,
        entropy=torch.rand(n, t, generator=g) * 3,
    )


def shard(inp: LossInputs, rank: int, world: int) -> LossInputs:
    """Every `world`-th sequence from `rank` on, as train_on_batch shards a mini-batch."""
    return LossInputs(**{k: (v[rank::world] if isinstance(v, torch.Tensor) else v) for k, v in vars(inp).items()})


def stats_of(inp: LossInputs, seeded_rows: list[int] | None = None) -> Stats:
    """The loss statistics of `inp`, the trainer's per-seed |log π_θ − log π_h| (recorded only
    where a seeded sequence is, so only by process 1), and the two test-only metrics (declare them
    first: `METRICS.update(TEST_METRICS)`). `seeded_rows` spares reading `inp.seeded` off a GPU."""
    stats = compute_policy_loss(inp, LossSettings()).stats
    gap = (inp.logprobs - inp.behaviour_logprobs).abs() * inp.prefix_mask
    if seeded_rows is None:
        seeded_rows = torch.nonzero(inp.seeded).flatten().tolist()
    for i in seeded_rows:
        stats.add("actor/prefix_abs_log_ratio/age=1", gap[i].sum(), inp.prefix_mask[i].sum())
    stats.add("test/sequences", inp.logprobs.shape[0])
    stats.add("test/logprob_min", inp.logprobs.masked_fill(~inp.response_mask, float("inf")).min())
    return stats


def assert_union(got: dict, union: dict, halves: list[Stats]) -> None:
    """`got` (reduced from `halves`) is the statistics `union` of the whole batch, and the data are
    discriminating: the old reductions (mean of means, mean of maxima) would miss it."""
    import pytest  # the driver process does not need it

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


def main() -> None:
    from accelerate import Accelerator

    METRICS.update(TEST_METRICS)
    acc = Accelerator(cpu=True)
    assert acc.num_processes == 2, acc.num_processes
    # Seeded sequences (odd) live on process 1 only: process 0 has an empty prefix population and
    # never records actor/prefix_abs_log_ratio/age=1, which the reducer must still line up.
    metrics = stats_of(shard(batch(), acc.process_index, acc.num_processes)).metrics(across_processes=True)
    if acc.is_main_process:
        with open(sys.argv[1], "w") as f:
            json.dump(metrics, f)
    acc.wait_for_everyone()
    acc.end_training()  # destroys the process group: a gloo process exiting with it alive can abort


if __name__ == "__main__":
    main()
