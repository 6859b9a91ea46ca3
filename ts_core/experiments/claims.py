"""The paper's four claims, measured on a comparison: the tables at the top of a comparison report.

    claims_markdown(data, variants, runs_dir) -> Markdown (claims table, regime check, hard subset,
                                                seed age table)

Each claim is a paired difference at equal seed (same training prompts, same evaluation prompts and
sampling seeds) with a 95% t-interval over seeds and the paired t-test's two-sided p-value:

    1. beats GRPO on pass@1              test accuracy, thinking_seeds − grpo (the primary endpoint)
       ... and sequence-level mixing     test accuracy, thinking_seeds − seq_mix
    2. higher effective entropy          actor/effective_entropy/all (last iterations), ts − grpo
    3. less gradient lost to clipping    actor/pg_clipfrac_adv/all (|A|-weighted), ts − seq_mix
    4. larger explorable space           test pass@k at the largest k vs grpo and vs θ_0; share of hard
                                         prompts ever solved; distinct solution patterns per prompt
    2./4. at matched pass@1              effective entropy, validation pass@k and distinct patterns of
                                         ts and grpo at the evaluation steps where their validation
                                         pass@1 agree best (matched.py states the rule)

Verdict, after Holm's correction over all the table's rows (a family of m tests; a row with fewer
than two seeds counts as p = 1): "holds" when the Holm-adjusted p is below ALPHA and the mean lies on
the claimed side, "fails" when it is below ALPHA on the other side, "inconclusive" otherwise. The raw
p and the 95% interval are shown beside it; a claim is only read as holding when it survives the
correction. The hard subset is hard_subset.py's: the test prompts θ_0 solves in fewer than 25% of its
final-test samples, fixed from θ_0 alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thinking_seeds.experiments.hard_subset import HARD_THRESHOLD, add_hard_subset, hard_subset_stats
from thinking_seeds.experiments.matched import match_iterations, matched_differences
from thinking_seeds.experiments.power import holm, paired_t_p
from thinking_seeds.experiments.spec import CONTROL_METHOD

__all__ = [
    "ALPHA",
    "HARD_THRESHOLD",
    "claims_markdown",
    "claims_rows",
    "hard_subset_stats",
    "holm_verdict",
    "mean_ci",
    "t_quantile_975",
    "verdict",
]

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


def verdict(ci: tuple[float, float, float] | None, better: str = "higher") -> str:
    """'holds' / 'does not hold' / 'inconclusive' for a difference whose claimed side is `better`."""
    if ci is None or math.isnan(ci[1]):
        return "inconclusive (fewer than 2 seeds)"
    _, lo, hi = ci
    if better == "lower":
        lo, hi = -hi, -lo
    if lo > 0:
        return "holds"
    if hi < 0:
        return "does not hold"
    return "inconclusive"


def _fmt_ci(ci: tuple[float, float, float] | None, digits: int = 4) -> str:
    if ci is None:
        return "—"
    m, lo, hi = ci
    if math.isnan(lo):
        return f"{m:+.{digits}f}"
    return f"{m:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _per_seed(data: dict[str, Any], variants: dict[str, list[str]], variant: str, name: str) -> dict[int, float]:
    seed_of = {m["run_id"]: m.get("seed") for m in data["members"]}
    out = {}
    for r in variants.get(variant, []):
        v = data["per_run"].get(r, {}).get(name)
        if v is not None and not math.isnan(v):
            out[int(seed_of[r])] = float(v)
    return out


def paired(data, variants, a: str, b: str, name: str, name_b: str | None = None) -> tuple[list[tuple[int, float]], Any]:
    """[(seed, a − b)] at equal seeds and the 95% interval of the mean difference."""
    va, vb = _per_seed(data, variants, a, name), _per_seed(data, variants, b, name_b or name)
    diffs = [(s, va[s] - vb[s]) for s in sorted(va) if s in vb]
    return diffs, mean_ci([d for _, d in diffs])


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    return out + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows] + [""]


def _seeds(diffs: list[tuple[int, float]]) -> str:
    return ", ".join(f"s{s}: {d:+.3f}" for s, d in diffs) or "—"


def holm_verdict(mean: float | None, p_holm: float, n: int, better: str = "higher") -> str:
    """'holds' / 'fails' / 'inconclusive' from the Holm-adjusted p of a difference whose claimed
    side is `better` (a significant difference on the wrong side fails the claim)."""
    if n < 2 or mean is None:
        return "inconclusive (fewer than 2 seeds)"
    if p_holm >= ALPHA:
        return "inconclusive"
    return "holds" if (mean > 0) == (better == "higher") else "fails"


def _fmt_p(p: float) -> str:
    if math.isnan(p):
        return "—"
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def claims_rows(
    data: dict[str, Any],
    variants: dict[str, list[str]],
    hard: tuple[list[str], int] | None,
    ts: str = "thinking_seeds",
    grpo: str = "grpo",
    seq: str = "seq_mix",
) -> list[dict[str, Any]]:
    """The claims table's rows: claim, measurement, per-seed differences, interval, raw p, Holm p,
    verdict. Holm runs over every row returned (the family is the table)."""
    base = data["base_test"]
    ks = sorted({int(n.rsplit("@", 1)[1]) for v in data["per_run"].values() for n in v if n.startswith("test/pass@")})
    kmax = ks[-1] if ks else None
    rows: list[dict[str, Any]] = []

    def row(claim: str, measure: str, diffs: list[tuple[int, float]], better: str = "higher") -> None:
        xs = [d for _, d in diffs]
        rows.append(
            {"claim": claim, "measurement": measure, "diffs": diffs, "ci": mean_ci(xs), "p": paired_t_p(xs)}
            | {"better": better, "n": len(xs)}
        )

    d, _ = paired(data, variants, ts, grpo, "test/accuracy")
    row("1. beats GRPO on pass@1", f"test accuracy, {ts} − {grpo}", d)
    if seq in variants:
        row(
            "1. beats sequence-level mixing on pass@1",
            f"test accuracy, {ts} − {seq}",
            paired(data, variants, ts, seq, "test/accuracy")[0],
        )
    row(
        "2. higher effective entropy",
        f"effective entropy (all tokens, last iterations), {ts} − {grpo}",
        paired(data, variants, ts, grpo, "actor/effective_entropy/all")[0],
    )
    if seq in variants:
        row(
            "3. less gradient lost to clipping",
            f"|A|-weighted clipped share of all tokens, {ts} − {seq}",
            paired(data, variants, ts, seq, "actor/pg_clipfrac_adv/all")[0],
            better="lower",
        )
    if kmax:
        explore = "4. larger explorable space"
        row(explore, f"test pass@{kmax}, {ts} − {grpo}", paired(data, variants, ts, grpo, f"test/pass@{kmax}")[0])
        b = base.get(f"test/pass@{kmax}")
        if b is not None:
            diffs = sorted((s, v - b) for s, v in _per_seed(data, variants, ts, f"test/pass@{kmax}").items())
            row(explore, f"test pass@{kmax}, {ts} − θ_0 ({b:.4f})", diffs)
        if hard:
            row(
                explore,
                f"share of the {len(hard[0])} hard prompts (θ_0 < {HARD_THRESHOLD:.0%}) solved at least once in "
                f"{hard[1]} samples, {ts} − {grpo}",
                paired(data, variants, ts, grpo, "hard/ever_solved")[0],
            )
        d, _ = paired(data, variants, ts, grpo, "test/distinct_patterns")
        if d:
            row(explore, f"distinct correct solution patterns per test prompt, {ts} − {grpo}", d)
    match = match_iterations(data, variants, ts, grpo) if data.get("curves") else None
    if match:
        at = (
            f"at matched validation pass@1 ({ts} θ_{match.step_a} {match.pass1_a:.4f}, {grpo} θ_{match.step_b} "
            f"{match.pass1_b:.4f})"
        )
        vk = max(
            (int(n.rsplit("@", 1)[1]) for c in data["curves"].values() for n in c if n.startswith("eval/pass@")),
            default=None,
        )
        for claim, measure, name in (
            ("2. higher effective entropy", "effective entropy (all tokens)", "actor/effective_entropy/all"),
            ("4. larger explorable space", f"validation pass@{vk}", f"eval/pass@{vk}"),
            ("4. larger explorable space", "distinct correct patterns per validation prompt", "eval/distinct_patterns"),
        ):
            d = matched_differences(data, variants, match, name)
            if d:
                row(claim, f"{measure} {at}, {ts} − {grpo}", d)
    for r, p_adj in zip(rows, holm([r["p"] for r in rows]), strict=True):
        r["p_holm"] = p_adj
        r["verdict"] = holm_verdict(r["ci"][0] if r["ci"] else None, p_adj, r["n"], r["better"])
    return rows


def claims_markdown(
    data: dict[str, Any],
    variants: dict[str, list[str]],
    runs_dir: Path,
    ts: str = "thinking_seeds",
    grpo: str = "grpo",
    seq: str = "seq_mix",
    title: str = "The paper's claims on this testbed",
    extras: bool = True,
) -> str:
    """The claims table (Holm-adjusted) and, with `extras`, the regime check, the hard-subset table and
    |log π_θ/π_h| by seed age."""
    if ts not in variants or grpo not in variants:
        return ""
    hard = add_hard_subset(data, runs_dir)
    rows = claims_rows(data, variants, hard, ts, grpo, seq)
    ks = sorted({int(n.rsplit("@", 1)[1]) for v in data["per_run"].values() for n in v if n.startswith("test/pass@")})
    md = [
        f"## {title}",
        "",
        "Paired differences at equal seed, mean [95% t-interval] over seeds, then per seed; p: the paired t-test's "
        f"two-sided p-value; Holm: adjusted by Holm's step-down method over the {len(rows)} rows of this table "
        "(a row with fewer than two seeds counts as p = 1). Verdict, after Holm: *holds* when the adjusted p is "
        f"below {ALPHA} and the difference lies on the claimed side, *fails* when it lies on the other side, "
        "*inconclusive* otherwise. The matched rows compare the two methods at the evaluation steps where their "
        "mean validation pass@1 agree best (ts_core/experiments/matched.py states the rule).",
        "",
    ]
    md += _table(
        ["claim", "measurement", "difference [95% CI]", "per seed", "p", "p (Holm)", "verdict (Holm)"],
        [
            [r["claim"], r["measurement"], _fmt_ci(r["ci"]), _seeds(r["diffs"]), _fmt_p(r["p"])]
            + [_fmt_p(r["p_holm"]), r["verdict"]]
            for r in rows
        ],
    )
    if not extras:
        return "\n".join(md)
    md += _regime(data, variants, grpo, ks[-1] if ks else None)
    if hard:
        md += _hard_table(data, variants, hard)
    md += _age_table(data, variants)
    return "\n".join(md)


def _mean_of(data, runs: list[str], name: str) -> str:
    ci = mean_ci([data["per_run"].get(r, {}).get(name, float("nan")) for r in runs])
    return "—" if ci is None else (f"{ci[0]:.4f}" if math.isnan(ci[1]) else f"{ci[0]:.4f} [{ci[1]:.4f}, {ci[2]:.4f}]")


def _regime(data, variants, grpo: str, kmax: int | None) -> list[str]:
    """Is this the paper's regime? GRPO raises pass@1 and narrows pass@k_max below θ_0; the SFT
    control gains little; on-policy tokens are clipped (several optimizer steps per batch)."""
    base = data["base_test"]
    md = ["### The regime", ""]
    rows = [
        [
            "θ_0 test pass@1 → GRPO",
            f"{base.get('test/accuracy', float('nan')):.4f}",
            _mean_of(data, variants[grpo], "test/accuracy"),
        ]
    ]
    if kmax:
        rows.append(
            [
                f"θ_0 test pass@{kmax} → GRPO",
                f"{base.get(f'test/pass@{kmax}', float('nan')):.4f}",
                _mean_of(data, variants[grpo], f"test/pass@{kmax}"),
            ]
        )
    if CONTROL_METHOD in variants:
        rows.append(
            [
                "θ_0 test pass@1 → SFT control (same compute)",
                f"{base.get('test/accuracy', float('nan')):.4f}",
                _mean_of(data, variants[CONTROL_METHOD], "test/accuracy"),
            ]
        )
    rows.append(
        [
            "on-policy clip fraction (GRPO, last iterations)",
            "—",
            _mean_of(data, variants[grpo], "actor/pg_clipfrac/on_policy"),
        ]
    )
    md += _table(["check", "θ_0", "after training (mean [95% CI] over seeds)"], rows)
    return md


def _hard_table(data, variants, hard: tuple[list[str], int], key: str = "hard") -> list[str]:
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


def _age_table(data, variants) -> list[str]:
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
