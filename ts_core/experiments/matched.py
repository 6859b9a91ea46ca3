"""The diversity claims at matched pass@1: is a method more diverse, or only less far along?

    m = match_iterations(data, variants, "thinking_seeds", "grpo")
    m.step_a, m.step_b, m.gap        # e.g. 150, 50, +0.003: TS's θ_150 against GRPO's θ_50
    diffs = matched_differences(data, variants, m, "eval/distinct_patterns")   # [(seed, a − b)]

A method that improves pass@1 more slowly also narrows more slowly, so comparing two methods'
final policies mixes "more diverse" with "less trained". These rows compare each method's policy at
the evaluation steps where their validation pass@1 agree best.

The matching rule (match_iterations), exactly:

1. The seeds are those both variants ran and whose in-training validation curve (`eval/accuracy`,
   the evaluate stage every eval.every iterations) is there.
2. A candidate step of a variant is an evaluation step s > 0 (θ_0 is shared: matching on it would
   always pick the untrained policy) that every one of those seeds evaluated; its pass@1 is the
   mean of `eval/accuracy` at s over those seeds.
3. The pair (step_a, step_b) minimises |pass@1_a(step_a) − pass@1_b(step_b)|; among pairs whose gap
   is within 1e-9 of the smallest, the one with the larger min(step_a, step_b), then the larger
   step_a, is taken (the most-trained policies that match).
4. One pair for all seeds, so every seed's difference compares the same two training stages;
   matching per seed would select on each seed's evaluation noise.

A match is only as good as the noise allows: the mean pass@1 of 10 seeds has a standard error of
about 0.005, so pairs whose gaps differ by less are equally good matches, and picking one of them is
picking noise. `candidate_matches` therefore returns every pair whose gap lies within one standard
error of zero (the standard error of the per-seed gaps of that pair over the shared seeds), best
first; a matched claim is read at all of them (claims.py: it holds only when it holds at every
candidate pair), and it is left out when no pair lies within one standard error.

The matched differences are then paired at equal seed as everywhere else (claims.py): validation
metrics at those steps, and the effective entropy averaged over the WINDOW update iterations that
led to each step (iterations s − WINDOW ≤ k < s, the policies θ_{s−WINDOW} .. θ_{s−1}).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["WINDOW", "Match", "candidate_matches", "match_iterations", "matched_differences"]

WINDOW = 10  # update iterations averaged for a per-iteration metric at an evaluation step
_TIE = 1e-9


@dataclass(frozen=True)
class Match:
    """The evaluation steps where two variants' mean validation pass@1 agree best."""

    a: str
    b: str
    step_a: int
    step_b: int
    pass1_a: float
    pass1_b: float
    seeds: tuple[int, ...]
    se: float = float("nan")  # standard error of the per-seed gaps (nan with one seed)

    @property
    def gap(self) -> float:
        """pass@1 of a at step_a minus that of b at step_b (what the matching could not remove)."""
        return self.pass1_a - self.pass1_b


def _curves(data: dict[str, Any], variants: dict[str, list[str]], variant: str) -> dict[int, dict[str, list]]:
    seed_of = {m["run_id"]: m.get("seed") for m in data["members"]}
    return {int(seed_of[r]): data["curves"][r] for r in variants.get(variant, []) if r in data.get("curves", {})}


def _at(series: Sequence[tuple[int, float]]) -> dict[int, float]:
    return {int(it): float(v) for it, v in series}


def match_iterations(
    data: dict[str, Any], variants: dict[str, list[str]], a: str, b: str, name: str = "eval/accuracy"
) -> Match | None:
    """The pair of evaluation steps of the module docstring's rule, or None when the two variants
    share no seed with a validation curve beyond θ_0."""
    ca, cb = _curves(data, variants, a), _curves(data, variants, b)
    seeds = sorted(s for s in ca if s in cb and ca[s].get(name) and cb[s].get(name))
    if not seeds:
        return None

    def means(c: dict[int, dict[str, list]]) -> dict[int, float]:
        per_seed = [_at(c[s][name]) for s in seeds]
        steps = set.intersection(*(set(p) for p in per_seed)) - {0}
        return {st: statistics.fmean(p[st] for p in per_seed) for st in steps}

    ma, mb = means(ca), means(cb)
    if not ma or not mb:
        return None
    pairs = [(abs(ma[i] - mb[j]), i, j) for i in ma for j in mb]
    best = min(p[0] for p in pairs)
    _, i, j = max((p for p in pairs if p[0] <= best + _TIE), key=lambda p: (min(p[1], p[2]), p[1]))
    return Match(a, b, i, j, ma[i], mb[j], tuple(seeds))


def candidate_matches(
    data: dict[str, Any], variants: dict[str, list[str]], a: str, b: str, name: str = "eval/accuracy"
) -> list[Match]:
    """Every pair of evaluation steps (θ_0 excluded) whose mean pass@1 gap lies within one standard
    error of zero, the standard error of that pair's per-seed gaps; best (smallest |gap|, then the
    tie rule of match_iterations) first. Empty when no pair is that close, or with fewer than two
    shared seeds (no standard error to judge a match by)."""
    ca, cb = _curves(data, variants, a), _curves(data, variants, b)
    seeds = sorted(s for s in ca if s in cb and ca[s].get(name) and cb[s].get(name))
    if len(seeds) < 2:
        return []
    pa, pb = [_at(ca[s][name]) for s in seeds], [_at(cb[s][name]) for s in seeds]
    steps_a = set.intersection(*(set(p) for p in pa)) - {0}
    steps_b = set.intersection(*(set(p) for p in pb)) - {0}
    out = []
    for i in steps_a:
        for j in steps_b:
            gaps = [x[i] - y[j] for x, y in zip(pa, pb, strict=True)]
            gap, se = statistics.fmean(gaps), statistics.stdev(gaps) / math.sqrt(len(gaps))
            if abs(gap) <= se:
                out.append(
                    Match(
                        a,
                        b,
                        i,
                        j,
                        statistics.fmean(x[i] for x in pa),
                        statistics.fmean(y[j] for y in pb),
                        tuple(seeds),
                        se,
                    )
                )
    return sorted(out, key=lambda m: (round(abs(m.gap), 9), -min(m.step_a, m.step_b), -m.step_a))


def _value(curve: dict[str, list], name: str, step: int, window: int) -> float | None:
    series = curve.get(name) or []
    if name.startswith("eval"):
        return _at(series).get(step)
    vals = [v for it, v in series if step - window <= it < step]
    return statistics.fmean(vals) if vals else None


def matched_differences(
    data: dict[str, Any], variants: dict[str, list[str]], match: Match, name: str, window: int = WINDOW
) -> list[tuple[int, float]]:
    """[(seed, a's `name` at step_a − b's at step_b)] over the match's seeds that have both values.

    An evaluation metric (`eval/...`) is read at the step; a per-iteration metric (an update's
    `actor/...`) is averaged over the `window` update iterations before it."""
    ca, cb = _curves(data, variants, match.a), _curves(data, variants, match.b)
    out = []
    for s in match.seeds:
        va, vb = _value(ca[s], name, match.step_a, window), _value(cb[s], name, match.step_b, window)
        if va is not None and vb is not None:
            out.append((s, va - vb))
    return out
