"""The tables around the claims table (claims.py): its introduction, the regime check, the hard
subset and the seeds' off-policyness by source age, with the interval arithmetic they share (the
t-interval of a mean over seeds, the Markdown table). Never imports prefect.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from thinking_seeds.experiments.hard_subset import HARD_THRESHOLD
from thinking_seeds.experiments.run_spec import CONTROL_METHOD

ALPHA = 0.05
# Two-sided 95% Student t quantiles by degrees of freedom (standard table values).
_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (table; 1.96 beyond 30)."""
    if df < 1:
        return float("nan")
    if df in _T975:
        return _T975[df]
    below = max(d for d in _T975 if d < df) if df < 30 else None
    return _T975[below] if below else 1.96  # conservative: the next smaller df's (wider) value


def mean_ci(xs: Sequence[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): the 95% t-interval of the mean; (x, nan, nan) for one value; None for none."""
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return None
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    half = t_quantile_975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def _fmt_ci(ci: tuple[float, float, float] | None, digits: int = 4) -> str:
    if ci is None:
        return "—"
    m, lo, hi = ci
    if math.isnan(lo):
        return f"{m:+.{digits}f}"
    return f"{m:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    return out + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows] + [""]


def claims_intro(n_rows: int, equal_registered: bool = False) -> list[str]:
    """The paragraph above a claims table: what its columns and verdicts mean."""
    last = (
        "This comparison registered the equal-iterations reading (ts_core/experiments/equal_reading.py): "
        "each row whose arms train different numbers of iterations compares the longer arm's checkpoint at "
        "the shorter arm's count with the other arm's final policy, paired by seed, and that reading is the "
        "row's difference, p and verdict; the last column reads it at the runs' ends (compute matched), not "
        "Holm-adjusted."
        if equal_registered
        else "The last column reads the same row at equal iterations (ts_core/experiments/equal_reading.py): the "
        "arm given more iterations at its checkpoint of the other arm's count, paired by seed, beside the "
        "compute-matched reading; not Holm-adjusted, and none where that checkpoint was not evaluated."
    )
    return [
        "Paired differences at equal seed, mean [95% t-interval] over seeds, then per seed; p: the paired t-test's "
        f"two-sided p-value; Holm: adjusted by Holm's step-down method over the {n_rows} rows of this table "
        "(a row with fewer than two seeds counts as p = 1). Verdict, after Holm: *holds* when the adjusted p is "
        f"below {ALPHA} and the difference lies on the claimed side, *fails* when it lies on the other side, "
        "*inconclusive* otherwise. A row against θ_0 adds θ_0's own sampling sd (its value under another sampling "
        "seed, estimated from its per-prompt counts: ts_core/experiments/base_noise.py) to the standard error. "
        "A matched row compares the two methods at every pair of evaluation steps whose mean validation pass@1 "
        "agree within one standard error (ts_core/experiments/matched.py), one difference per pair; its p is the "
        "largest of the pairs' (it holds only if it holds at every pair); with no such pair it is left out. " + last,
    ]


def _mean_of(data, runs: list[str], name: str) -> str:
    ci = mean_ci([data["per_run"].get(r, {}).get(name, float("nan")) for r in runs])
    return "—" if ci is None else (f"{ci[0]:.4f}" if math.isnan(ci[1]) else f"{ci[0]:.4f} [{ci[1]:.4f}, {ci[2]:.4f}]")


def _base_cell(data, name: str) -> str:
    """θ_0's value, ± its sampling sd (base_noise.py) when known."""
    v, sd = data["base_test"].get(name, float("nan")), data.get("base_sd", {}).get(name)
    return f"{v:.4f}" + (f" ± {sd:.4f} (sampling sd)" if sd is not None else "")


def regime_lines(data, variants, grpo: str, kmax: int | None) -> list[str]:
    """Is this the paper's regime? GRPO raises pass@1 and narrows pass@k_max below θ_0; the SFT
    control gains little; on-policy tokens are clipped (several optimizer steps per batch)."""
    md = ["### The regime", ""]
    checks = [("θ_0 test pass@1 → GRPO", "test/accuracy", grpo)]
    if kmax:
        checks.append((f"θ_0 test pass@{kmax} → GRPO", f"test/pass@{kmax}", grpo))
    if CONTROL_METHOD in variants:
        checks.append(("θ_0 test pass@1 → SFT control (same compute)", "test/accuracy", CONTROL_METHOD))
    rows = [[label, _base_cell(data, name), _mean_of(data, variants[v], name)] for label, name, v in checks]
    clip = _mean_of(data, variants[grpo], "actor/pg_clipfrac/on_policy")
    rows.append(["on-policy clip fraction (GRPO, last iterations)", "—", clip])
    md += _table(["check", "θ_0", "after training (mean [95% CI] over seeds)"], rows)
    return md


def hard_table(data, variants, hard: tuple[list[str], int], key: str = "hard") -> list[str]:
    ids, k = hard
    base = data["base_test"]
    md = [
        f"### The hard subset: {len(ids)} test prompts θ_0 solves in < {HARD_THRESHOLD:.0%} of {k} samples",
        "",
        "Chosen from θ_0's final test alone, before any RL (ts_core/experiments/hard_subset.py).",
        "",
    ]
    names = [f"{key}/accuracy", f"{key}/pass@{k}", f"{key}/ever_solved", f"{key}/distinct_patterns"]
    rows = [["θ_0"] + [f"{base[n]:.4f}" if n in base else "—" for n in names]]
    rows += [[v] + [_mean_of(data, runs, n) for n in names] for v, runs in variants.items()]
    return md + _table(["variant", "accuracy", f"pass@{k}", "solved at least once", "distinct patterns / prompt"], rows)


def age_table(data, variants) -> list[str]:
    """Mean |log π_θ − log π_h| on prefix tokens by the seed's source age: are historical seeds off-policy?"""
    ages = sorted(
        {
            n.split("/", 2)[2]
            for v in data["per_run"].values()
            for n in v
            if n.startswith("actor/prefix_abs_log_ratio/")
        },
        key=lambda a: int(a[4:].split("-")[0].rstrip("+")),
    )
    if not ages:
        return []
    md = ["### How off-policy the seeds are: mean |log π_θ − log π_h| on prefix tokens by source age (iterations)", ""]
    rows = [
        [v] + [_mean_of(data, runs, f"actor/prefix_abs_log_ratio/{a}") for a in ages]
        for v, runs in variants.items()
        if any(f"actor/prefix_abs_log_ratio/{a}" in data["per_run"].get(r, {}) for r in runs for a in ages)
    ]
    return md + _table(["variant"] + ages, rows)
