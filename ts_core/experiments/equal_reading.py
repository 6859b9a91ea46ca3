"""Every endpoint at equal iterations: the reading beside the compute-matched one.

    equal_pair(data, variants, "thinking_seeds", "grpo", "test/pass@64")
        -> EqualReading(step=150, longer="grpo", diffs=[(200, +0.012), ...])

When a comparison matches compute by iterations (`--method-set grpo:iterations=185`), the method
given more iterations is ahead by iterations as well as by method: a difference "TS − GRPO" at the
runs' ends mixes both. The equal-iterations reading compares the two at the shorter arm's count
instead: the longer arm's θ_step (step = the shorter arm's iterations) against the shorter arm's final
policy, paired by seed. The longer arm's values there are the `equal/` ones of compare_data.collect
(its test at θ_step, written by the equal-iterations evaluation; its in-training evaluation at that
step; its per-iteration metrics over the iterations before it); a metric that θ_step was not
evaluated on has no equal reading (the report says so). Not part of any Holm family: it is a second
reading of the same rows, shown beside them. Never imports prefect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from thinking_seeds.experiments.compare_data import EQUAL
from thinking_seeds.experiments.planning import COMPUTE_MATCHED, EQUAL_ITERATIONS, READINGS

__all__ = ["COMPUTE_MATCHED", "EQUAL_ITERATIONS", "READINGS", "EqualReading", "equal_pair", "iterations_of", "per_seed"]


@dataclass(frozen=True)
class EqualReading:
    """`a − b` with both at `step` iterations; `longer`: the arm read at its earlier checkpoint."""

    step: int
    longer: str
    diffs: list[tuple[int, float]]


def iterations_of(data: dict[str, Any], variants: dict[str, list[str]], variant: str) -> int | None:
    """The iterations a variant trains (its first run's config), None when no config says."""
    for r in variants.get(variant, []):
        n = (data.get("configs", {}).get(r) or {}).get("iterations")
        if n is not None:
            return int(n)
    return None


def per_seed(data: dict[str, Any], runs: list[str], name: str, step: int | None = None) -> dict[int, float]:
    """{seed: value} of `name` (finite values only); with `step`, the run's value at θ_step (the equal/
    one, only where its equal-iterations step is `step`)."""
    seed_of = {m["run_id"]: m.get("seed") for m in data["members"]}
    out = {}
    for r in runs:
        v = data["per_run"].get(r, {})
        if step is not None:
            if v.get("equal_step") != step:
                continue
            x = v.get(EQUAL + name)
        else:
            x = v.get(name)
        if x is not None and not math.isnan(x):
            out[int(seed_of[r])] = float(x)
    return out


def equal_pair(data: dict[str, Any], variants: dict[str, list[str]], a: str, b: str, name: str) -> EqualReading | None:
    """`name` of a − b at equal iterations, paired by seed; None when a and b train the same number of
    iterations (the row's own reading is already at equal iterations) or a count is unknown. An empty
    `diffs` means the longer arm has no θ_step value of `name`."""
    na, nb = iterations_of(data, variants, a), iterations_of(data, variants, b)
    if na is None or nb is None or na == nb:
        return None
    step, longer = min(na, nb), (a if na > nb else b)
    va = per_seed(data, variants[a], name, step if longer == a else None)
    vb = per_seed(data, variants[b], name, step if longer == b else None)
    return EqualReading(step, longer, [(s, va[s] - vb[s]) for s in sorted(va) if s in vb])
