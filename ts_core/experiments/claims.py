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
                                         ts and grpo at every pair of evaluation steps whose validation
                                         pass@1 agree within one standard error (matched.py)

Every row is also read at equal iterations (equal_reading.py: the arm given more iterations at its
checkpoint of the other arm's count), beside the compute-matched reading and outside the Holm family.
A row against θ_0 carries θ_0's own sampling noise (base_noise.py). The primary endpoint (the first
row) also gets its one-sided 95% bounds and the smallest difference its seeds detect.

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
from pathlib import Path
from typing import Any

from thinking_seeds.experiments.base_noise import against_base, base_sampling_sd
from thinking_seeds.experiments.claims_tables import (
    ALPHA,
    _fmt_ci,
    _table,
    age_table,
    claims_intro,
    hard_table,
    mean_ci,
    regime_lines,
    t_quantile_975,
)
from thinking_seeds.experiments.compare_data import largest_k
from thinking_seeds.experiments.equal_reading import (
    COMPUTE_MATCHED,
    EQUAL_ITERATIONS,
    EqualReading,
    equal_pair,
    iterations_of,
    per_seed,
)
from thinking_seeds.experiments.hard_subset import HARD_THRESHOLD, add_hard_subset, base_per_prompt, hard_subset_stats
from thinking_seeds.experiments.matched import candidate_matches, matched_differences
from thinking_seeds.experiments.power import holm, min_detectable_effect, paired_t_p, t_ppf

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


def paired(data: dict[str, Any], variants: dict[str, list[str]], a: str, b: str, name: str) -> list[tuple[int, float]]:
    """[(seed, a − b)] of `name` at equal seeds. Runs of one seed share the training prompts of every iteration
    and the evaluation prompts and sampling seed (pipeline.graph.stage_seed): the difference cancels that noise."""
    va, vb = per_seed(data, variants.get(a, []), name), per_seed(data, variants.get(b, []), name)
    return [(s, va[s] - vb[s]) for s in sorted(va) if s in vb]


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


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


def _row(claim: str, measure: str, diffs: list[tuple[int, float]], better: str = "higher") -> dict[str, Any]:
    xs = [d for _, d in diffs]
    return {"claim": claim, "measurement": measure, "diffs": diffs, "ci": mean_ci(xs), "p": paired_t_p(xs)} | {
        "better": better,
        "n": len(xs),
    }


def _with_equal(r: dict[str, Any], data, variants, a: str, b: str, name: str) -> dict[str, Any]:
    """The row with its equal-iterations reading (equal_reading.py): None when both arms train the
    same iterations (the row is that reading), else the reading (its diffs may be empty)."""
    eq = equal_pair(data, variants, a, b, name)
    na, nb = iterations_of(data, variants, a), iterations_of(data, variants, b)
    r["equal"], r["equal_same"] = eq, na is not None and na == nb
    if eq is not None:
        xs = [d for _, d in eq.diffs]
        r["equal_ci"], r["equal_p"] = mean_ci(xs), paired_t_p(xs)
    return r


def _registered_equal(r: dict[str, Any]) -> dict[str, Any]:
    """A row whose registered reading is at equal iterations (`ts compare --reading equal_iterations`):
    the equal-iterations differences become the row's own (its interval, p and Holm verdict) and the
    compute-matched ones move to the side column. Rows whose arms train the same iterations, or against
    θ_0, are that reading already and stay as they are."""
    eq = r.get("equal")
    if eq is None:
        return r
    ends = EqualReading(step=eq.step, longer=eq.longer, diffs=r["diffs"])
    r["ends_ci"], r["ends_p"] = r["ci"], r["p"]
    r["diffs"], r["ci"], r["p"], r["n"] = eq.diffs, r["equal_ci"], r["equal_p"], len(eq.diffs)
    r["measurement"] = f"{r['measurement']} (at equal iterations: {eq.longer} at θ_{eq.step})"
    r["equal"], r["equal_ci"], r["equal_p"], r["ends"] = ends, r["ends_ci"], r["ends_p"], True
    return r


def _matched_rows(data, variants, ts: str, grpo: str) -> list[dict[str, Any]]:
    """The matched-pass@1 rows (matched.py): each metric read at every candidate pair within one
    standard error. The row's p is the largest of the pairs' (the claim holds only if it holds at
    every candidate: an intersection-union test), and 1 when the pairs disagree in sign; no candidate,
    no row."""
    cands = candidate_matches(data, variants, ts, grpo) if data.get("curves") else []
    if not cands:
        return []
    vk = largest_k(data["curves"], "eval/pass@")
    pairs = f"{len(cands)} pair(s) of {ts} θ vs {grpo} θ within one SE: " + "; ".join(
        f"θ_{m.step_a} vs θ_{m.step_b} {m.pass1_a:.4f} vs {m.pass1_b:.4f} (SE {m.se:.4f})" for m in cands
    )
    out = []
    for claim, measure, name in (
        ("2. higher effective entropy", "effective entropy (all tokens)", "actor/effective_entropy/all"),
        ("4. larger explorable space", f"validation pass@{vk}", f"eval/pass@{vk}"),
        ("4. larger explorable space", "distinct correct patterns per validation prompt", "eval/distinct_patterns"),
    ):
        per_pair = [(m, matched_differences(data, variants, m, name)) for m in cands]
        per_pair = [(m, d) for m, d in per_pair if d]
        if not per_pair:
            continue
        r = _row(claim, f"{measure} at matched validation pass@1 ({pairs}), {ts} − {grpo}", per_pair[0][1])
        reads = [(m, mean_ci([x for _, x in d]), paired_t_p([x for _, x in d])) for m, d in per_pair]
        r["pairs"] = reads
        r["seeds_of"] = f"θ_{cands[0].step_a} vs θ_{cands[0].step_b}: "
        signs = {ci[0] > 0 for _, ci, _ in reads if ci is not None}
        r["p"] = max(p for _, _, p in reads) if len(signs) == 1 else 1.0
        out.append(_with_equal(r, data, variants, ts, grpo, name))
    return out


def claims_rows(
    data: dict[str, Any],
    variants: dict[str, list[str]],
    hard: tuple[list[str], int] | None,
    ts: str = "thinking_seeds",
    grpo: str = "grpo",
    seq: str = "seq_mix",
    reading: str = COMPUTE_MATCHED,
) -> list[dict[str, Any]]:
    """The claims table's rows: claim, measurement, per-seed differences, interval, raw p, Holm p,
    verdict, and the other reading. Holm runs over every row returned (the family is the table), read
    as `reading` registers: at the runs' ends (compute matched, the default) or at equal iterations.
    A row against θ_0 adds θ_0's own sampling sd (data['base_sd'], base_noise.py) to its standard
    error; without it θ_0 is taken as exact and the measurement says so."""
    base = data["base_test"]
    kmax = largest_k(data["per_run"], "test/pass@")
    rows: list[dict[str, Any]] = []

    def vs(claim: str, measure: str, a: str, b: str, name: str, better: str = "higher") -> None:
        r = _with_equal(_row(claim, measure, paired(data, variants, a, b, name), better), data, variants, a, b, name)
        rows.append(_registered_equal(r) if reading == EQUAL_ITERATIONS else r)

    vs("1. beats GRPO on pass@1", f"test accuracy, {ts} − {grpo}", ts, grpo, "test/accuracy")
    if seq in variants:
        vs("1. beats sequence-level mixing on pass@1", f"test accuracy, {ts} − {seq}", ts, seq, "test/accuracy")
    vs(
        "2. higher effective entropy",
        f"effective entropy (all tokens, last iterations), {ts} − {grpo}",
        ts,
        grpo,
        "actor/effective_entropy/all",
    )
    if seq in variants:
        vs(
            "3. less gradient lost to clipping",
            f"|A|-weighted clipped share of all tokens, {ts} − {seq}",
            ts,
            seq,
            "actor/pg_clipfrac_adv/all",
            better="lower",
        )
    if kmax:
        explore = "4. larger explorable space"
        vs(explore, f"test pass@{kmax}, {ts} − {grpo}", ts, grpo, f"test/pass@{kmax}")
        name = f"test/pass@{kmax}"
        b = base.get(name)
        if b is not None:
            diffs = sorted((s, v - b) for s, v in per_seed(data, variants.get(ts, []), name).items())
            sd0 = data.get("base_sd", {}).get(name)
            noise = f"± {sd0:.4f} sampling sd" if sd0 is not None else "taken as exact: no per-prompt file"
            r = _row(explore, f"test pass@{kmax}, {ts} − θ_0 ({b:.4f} {noise})", diffs)
            if sd0 is not None:
                r["ci"], r["p"] = against_base([d for _, d in diffs], sd0)
            rows.append(r | {"equal": None, "vs_base": True})
        if hard:
            vs(
                explore,
                f"share of the {len(hard[0])} hard prompts (θ_0 < {HARD_THRESHOLD:.0%}) solved at least once in "
                f"{hard[1]} samples, {ts} − {grpo}",
                ts,
                grpo,
                "hard/ever_solved",
            )
        if paired(data, variants, ts, grpo, "test/distinct_patterns"):
            vs(
                explore,
                f"distinct correct solution patterns per test prompt, {ts} − {grpo}",
                ts,
                grpo,
                "test/distinct_patterns",
            )
    rows += _matched_rows(data, variants, ts, grpo)
    for r, p_adj in zip(rows, holm([r["p"] for r in rows]), strict=True):
        r["p_holm"] = p_adj
        r["verdict"] = holm_verdict(r["ci"][0] if r["ci"] else None, p_adj, r["n"], r["better"])
    return rows


def _equal_cell(r: dict[str, Any]) -> str:
    eq = r.get("equal")
    if r.get("vs_base"):
        return "—"
    if eq is None:
        return "the same (equal iterations)" if r.get("equal_same") else "—"
    if not eq.diffs:
        return "— (no final value)" if r.get("ends") else f"— (no θ_{eq.step} value of {eq.longer})"
    return f"{_fmt_ci(r['equal_ci'])}, p {_fmt_p(r['equal_p'])}, n {len(eq.diffs)}"


def _difference_cell(r: dict[str, Any]) -> str:
    """The difference [95% CI]; a matched row: one per candidate pair, the pairs in its measurement's order."""
    if "pairs" not in r:
        return _fmt_ci(r["ci"])
    return "; ".join(f"θ_{m.step_a} vs θ_{m.step_b}: {_fmt_ci(ci)} (p {_fmt_p(p)})" for m, ci, p in r["pairs"])


def primary_bound_lines(r: dict[str, Any], label: str) -> list[str]:
    """The primary endpoint beyond its verdict: the one-sided 95% bounds of the mean difference (what
    gain or loss the data exclude), the sd of the paired differences, and the smallest difference these
    seeds detect at 80% power."""
    xs = [d for _, d in r["diffs"]]
    if len(xs) < 2:
        return []
    m, sd, n = statistics.fmean(xs), statistics.stdev(xs), len(xs)
    half = t_ppf(0.95, n - 1) * sd / math.sqrt(n)
    mde = min_detectable_effect(sd, n)
    return [
        f"{label}: {r['measurement']}, {_fmt_ci(r['ci'])}; one-sided 95% bounds: the difference is below "
        f"{m + half:+.4f} and above {m - half:+.4f} (the data exclude a gain larger than {100 * (m + half):.1f} "
        f"points and a loss larger than {100 * (half - m):.1f} points at 95% confidence each). The paired "
        f"differences have sd {sd:.4f}; {n} seeds detect a difference of {100 * mde:.1f} points at 80% power "
        "(paired t-test, two-sided, alpha 0.05).",
        "",
    ]


def claims_markdown(
    data: dict[str, Any],
    variants: dict[str, list[str]],
    runs_dir: Path,
    ts: str = "thinking_seeds",
    grpo: str = "grpo",
    seq: str = "seq_mix",
    title: str = "The paper's claims on this testbed",
    extras: bool = True,
    primary: str | None = None,
    reading: str = COMPUTE_MATCHED,
) -> str:
    """The claims table (Holm-adjusted, with each row's equal-iterations reading beside it); with
    `primary` (its label), the first row's one-sided bounds; with `extras`, the regime check, the hard-subset table
    and |log π_θ/π_h| by seed age."""
    if ts not in variants or grpo not in variants:
        return ""
    hard = add_hard_subset(data, runs_dir)
    base_rows = base_per_prompt(runs_dir, [m["run_id"] for m in data["members"]])
    data["base_sd"] = {
        n: sd
        for n in data["base_test"]
        if (sd := base_sampling_sd(base_rows, n) if n.startswith("test/") else None) is not None
    }
    rows = claims_rows(data, variants, hard, ts, grpo, seq, reading)
    md = [f"## {title}", "", *claims_intro(len(rows), reading == EQUAL_ITERATIONS), ""]
    md += _table(
        ["claim", "measurement", "difference [95% CI]", "per seed", "p", "p (Holm)", "verdict (Holm)"]
        + [
            "at the runs' ends (compute matched): difference [95% CI], p"
            if reading == EQUAL_ITERATIONS
            else "at equal iterations: difference [95% CI], p"
        ],
        [
            [r["claim"], r["measurement"], _difference_cell(r), r.get("seeds_of", "") + _seeds(r["diffs"])]
            + [_fmt_p(r["p"])]
            + [_fmt_p(r["p_holm"]), r["verdict"], _equal_cell(r)]
            for r in rows
        ],
    )
    if primary and rows:
        md += primary_bound_lines(rows[0], primary)
    if not extras:
        return "\n".join(md)
    md += regime_lines(data, variants, grpo, largest_k(data["per_run"], "test/pass@"))
    if hard:
        md += hard_table(data, variants, hard)
    md += age_table(data, variants)
    return "\n".join(md)
