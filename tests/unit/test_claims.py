"""The claims table of a comparison report: intervals, verdicts, the hard subset, the regime rows."""

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thinking_seeds.experiments.claims import (
    claims_markdown,
    claims_rows,
    hard_subset_stats,
    holm_verdict,
    mean_ci,
    t_quantile_975,
    verdict,
)
from thinking_seeds.experiments.hard_subset import hard_prompts
from thinking_seeds.experiments.matched import match_iterations
from thinking_seeds.experiments.power import holm, paired_t_p


def test_mean_ci_uses_student_t():
    m, lo, hi = mean_ci([1.0, 2.0, 3.0])  # sd 1, n 3: half width 4.303 / sqrt(3)
    assert m == 2.0 and hi - m == pytest.approx(4.303 / math.sqrt(3))
    assert t_quantile_975(4) == 2.776 and t_quantile_975(11) == 2.228 and t_quantile_975(100) == 1.96
    assert math.isnan(mean_ci([0.5])[1]) and mean_ci([]) is None


def test_verdicts():
    assert verdict((0.02, 0.01, 0.03)) == "holds"
    assert verdict((-0.02, -0.03, -0.01)) == "does not hold"
    assert verdict((0.01, -0.01, 0.03)) == "inconclusive"
    assert verdict((-0.02, -0.03, -0.01), better="lower") == "holds"
    assert verdict((0.5, float("nan"), float("nan"))).startswith("inconclusive")


def test_hard_subset_stats():
    rows = {
        "a": {"n": 4, "correct": 0, "distinct_labels": 0},
        "b": {"n": 4, "correct": 2, "distinct_labels": 1},
        "c": {"n": 4, "correct": 4, "distinct_labels": 2},
    }
    s = hard_subset_stats(rows, ["a", "b"], 4)
    assert s == {"hard/accuracy": 0.25, "hard/pass@4": 0.5, "hard/ever_solved": 0.5, "hard/distinct_patterns": 0.5}


def _per_prompt(path, correct):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "step": 0,
                    "mode": "plain",
                    "prompt_id": f"p{i}",
                    "n": 8,
                    "correct": c,
                    "distinct_labels": min(c, 2),
                    "label_entropy": 0.0,
                }
                for i, c in enumerate(correct)
            ]
        ),
        path,
    )


def test_claims_markdown_on_a_made_up_comparison(tmp_path):
    # grpo: 3 seeds; thinking_seeds better on accuracy at every seed, seq_mix clips more.
    members, per_run = [], {}
    for method, acc, clip in (("grpo", 0.30, 0.01), ("thinking_seeds", 0.35, 0.010), ("seq_mix", 0.29, 0.02)):
        for seed in range(3):
            rid = f"c-{method}-s{seed}"
            members.append({"run_id": rid, "method": method, "seed": seed})
            per_run[rid] = {
                "test/accuracy": acc + 0.001 * seed,
                "test/pass@8": 0.6 - (method == "grpo") * 0.1,
                "actor/effective_entropy/all": 0.2,
                "actor/pg_clipfrac_adv/all": clip + 0.001 * seed,
                "actor/pg_clipfrac/on_policy": 0.003,
                "actor/prefix_abs_log_ratio/age=20-49": 0.3,
            }
            _per_prompt(
                tmp_path / rid / "evals" / "final-test" / "step_000100.parquet",
                [8, 0, 1] if method == "grpo" else [8, 1, 1],
            )
    _per_prompt(tmp_path / "c-grpo-s0" / "evals" / "final-test" / "step_000000.parquet", [6, 0, 0])
    variants = {m: [f"c-{m}-s{s}" for s in range(3)] for m in ("grpo", "thinking_seeds", "seq_mix")}
    data = {"members": members, "per_run": per_run, "base_test": {"test/accuracy": 0.25, "test/pass@8": 0.55}}
    md = claims_markdown(data, variants, tmp_path)
    lines = {line.split(" | ")[0].lstrip("| "): line for line in md.splitlines() if line.startswith("| ")}
    assert lines["1. beats GRPO on pass@1"].endswith("| holds | — |") and "+0.0500" in lines["1. beats GRPO on pass@1"]
    assert "inconclusive" in lines["2. higher effective entropy"]  # identical everywhere: zero spread
    assert "| holds" in lines["3. less gradient lost to clipping"]
    assert "2 test prompts θ_0 solves in < 25%" in md and "share of the 2 hard prompts" in md
    # hard prompts p1, p2: grpo solves p2 only (0.5), thinking_seeds both (1.0)
    assert per_run["c-thinking_seeds-s0"]["hard/ever_solved"] == 1.0 and per_run["c-grpo-s0"]["hard/ever_solved"] == 0.5
    assert "age=20-49" in md and "The regime" in md


def test_the_hard_subset_is_fixed_from_theta0_below_25_percent(tmp_path):
    # θ_0 solves p0 6/8, p1 0/8, p2 1/8 (< 25%), p3 2/8 (= 25%: not hard). One subset, from θ_0 alone:
    # what the trained runs solve does not move it.
    members, per_run = [], {}
    for method in ("grpo", "thinking_seeds"):
        for seed in range(2):
            rid = f"c-{method}-s{seed}"
            members.append({"run_id": rid, "method": method, "seed": seed})
            per_run[rid] = {"test/accuracy": 0.5, "test/pass@8": 0.9}
            _per_prompt(
                tmp_path / rid / "evals" / "final-test" / "step_000100.parquet",
                [8, 0, 2, 0] if method == "grpo" else [0, 1, 0, 8],
            )
    _per_prompt(tmp_path / "c-grpo-s0" / "evals" / "final-test" / "step_000000.parquet", [6, 0, 1, 2])
    variants = {m: [f"c-{m}-s{s}" for s in range(2)] for m in ("grpo", "thinking_seeds")}
    data = {"members": members, "per_run": per_run, "base_test": {"test/accuracy": 0.25, "test/pass@8": 0.55}}
    md = claims_markdown(data, variants, tmp_path)
    assert "share of the 2 hard prompts (θ_0 < 25%)" in md
    assert "### The hard subset: 2 test prompts θ_0 solves in < 25% of 8 samples" in md
    assert "< 10%" not in md and md.count("### The hard subset") == 1  # the 1-prompt subset is gone
    assert per_run["c-grpo-s0"]["hard/ever_solved"] == 0.5  # p2 only
    assert per_run["c-thinking_seeds-s1"]["hard/accuracy"] == pytest.approx(1 / 16)  # p1 1/8, p2 0/8
    assert data["base_test"]["hard/accuracy"] == pytest.approx(1 / 16)
    assert hard_prompts({"a": {"n": 4, "correct": 0}, "b": {"n": 4, "correct": 1}}) == ["a"]  # 25% is not hard


def test_holm_adjusts_in_the_given_order_and_counts_missing_p_as_one():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.01, float("nan")]) == pytest.approx([0.02, 1.0])  # a nan row still widens the family
    assert holm_verdict(0.02, 0.01, 5) == "holds" and holm_verdict(-0.02, 0.01, 5) == "fails"
    assert holm_verdict(-0.02, 0.01, 5, better="lower") == "holds" and holm_verdict(0.02, 0.2, 5) == "inconclusive"
    assert holm_verdict(0.02, 0.0, 1).startswith("inconclusive")


def _plateau_like(tmp_path):
    """Five seeds of grpo and thinking_seeds, three of seq_mix, with the plateau comparison's per-seed
    differences (docs/results/countdown-plateau) and validation curves where TS at θ_150 matches GRPO at θ_50."""
    acc_diff = [-0.036, -0.020, 0.002, 0.020, -0.053]
    ent_diff = [0.009, 0.011, 0.017, 0.012, 0.012]
    pat_diff = [0.027, 0.023, 0.035, 0.020, 0.012]
    members, per_run, curves = [], {}, {}
    for method in ("grpo", "thinking_seeds", "seq_mix"):
        for s in range(3 if method == "seq_mix" else 5):
            rid = f"c-{method}-s{s}"
            members.append({"run_id": rid, "method": method, "seed": s})
            ts = method == "thinking_seeds"
            per_run[rid] = {
                "test/accuracy": 0.62
                + (acc_diff[s] if ts else 0.0)
                + (acc_diff[s] + 0.03 + 0.001 * s if method == "seq_mix" else 0),
                "actor/effective_entropy/all": 0.3 + (ent_diff[s] if ts else 0.0),
                "test/distinct_patterns": 1.1 + (pat_diff[s] if ts else 0.0),
            }
            # validation pass@1: grpo rises fast (0.59 at 50), TS slowly (0.59 only at 150)
            acc = {0: 0.54, 50: 0.59, 100: 0.62, 150: 0.63} if not ts else {0: 0.54, 50: 0.56, 100: 0.575, 150: 0.589}
            if ts:  # seed noise, so that a match has a standard error (0.0021 here) to be judged by
                acc = {it: v + 0.003 * (s - 2) for it, v in acc.items()}
            pat = {it: 1.0 + 0.001 * s + (0.01 if ts and it == 150 else 0.0) for it in acc}
            curves[rid] = {
                "eval/accuracy": sorted(acc.items()),
                "eval/distinct_patterns": sorted(pat.items()),
                "actor/effective_entropy/all": [(k, 0.3 + (0.002 if ts else 0.0) + 0.0001 * s) for k in range(150)],
            }
    variants = {m: [r["run_id"] for r in members if r["method"] == m] for m in ("grpo", "thinking_seeds", "seq_mix")}
    data = {"members": members, "per_run": per_run, "curves": curves, "base_test": {"test/accuracy": 0.55}}
    return data, variants


def test_claims_table_adds_seq_mix_half_matched_rows_and_holm(tmp_path):
    data, variants = _plateau_like(tmp_path)
    listed = claims_rows(data, variants, None)
    rows = {r["measurement"]: r for r in listed}
    seq = rows["test accuracy, thinking_seeds − seq_mix"]
    assert seq["claim"] == "1. beats sequence-level mixing on pass@1"
    assert [round(d, 3) for _, d in seq["diffs"]] == [-0.03, -0.031, -0.032]  # seq_mix: TS + 0.03 + 0.001 s
    ent = rows["effective entropy (all tokens, last iterations), thinking_seeds − grpo"]
    assert ent["p"] == pytest.approx(paired_t_p([0.009, 0.011, 0.017, 0.012, 0.012]))
    assert ent["p"] < 0.001 and ent["verdict"] == "holds"
    m = len(rows)
    assert [r["p_holm"] for r in listed] == holm([r["p"] for r in listed])  # one family: the whole table
    assert ent["p"] < ent["p_holm"] <= m * ent["p"]
    assert rows["test accuracy, thinking_seeds − grpo"]["verdict"] == "inconclusive"
    assert seq["verdict"] == "fails"  # significantly below seq_mix at every seed after Holm
    matched = [r for r in rows.values() if "at matched validation pass@1" in r["measurement"]]
    assert len(matched) == 2  # effective entropy and distinct patterns (no eval/pass@k curve here)
    at = "(1 pair(s) of thinking_seeds θ vs grpo θ within one SE: θ_150 vs θ_50 0.5890 vs 0.5900 (SE 0.0021))"
    assert all(at in r["measurement"] for r in matched)
    pat = next(r for r in matched if "distinct" in r["measurement"])
    assert [d for _, d in pat["diffs"]] == pytest.approx([0.01] * 5)  # TS's θ_150 vs GRPO's θ_50, same seed
    ent_m = next(r for r in matched if "entropy" in r["measurement"])
    assert [d for _, d in ent_m["diffs"]] == pytest.approx([0.002] * 5)  # mean over iterations 140..149 vs 40..49
    md = claims_markdown(data, variants, tmp_path)
    assert f"over the {m} rows of this table" in md and "| p (Holm) | verdict (Holm) |" in md


def test_matching_rule_skips_theta0_and_breaks_ties_towards_later_steps():
    def data_of(a_acc, b_acc):
        members = [{"run_id": "a0", "seed": 0}, {"run_id": "b0", "seed": 0}]
        curves = {"a0": {"eval/accuracy": sorted(a_acc.items())}, "b0": {"eval/accuracy": sorted(b_acc.items())}}
        return {"members": members, "curves": curves}, {"a": ["a0"], "b": ["b0"]}

    # θ_0 is identical (gap 0) but never matched; the best trained pair is (100, 50).
    m = match_iterations(*data_of({0: 0.5, 50: 0.52, 100: 0.6}, {0: 0.5, 50: 0.61, 100: 0.7}), "a", "b")
    assert (m.step_a, m.step_b) == (100, 50) and m.gap == pytest.approx(-0.01)
    # equal gaps: (100, 100) beats (50, 50): the larger min(step_a, step_b)
    m = match_iterations(*data_of({50: 0.5, 100: 0.6}, {50: 0.5, 100: 0.6}), "a", "b")
    assert (m.step_a, m.step_b) == (100, 100)
    assert match_iterations(*data_of({0: 0.5}, {0: 0.5}), "a", "b") is None


def test_a_second_arm_gets_its_own_table_without_the_extras(tmp_path):
    data, variants = _plateau_like(tmp_path)
    full = claims_markdown(data, variants, tmp_path)
    own = claims_markdown(data, variants, tmp_path, title="The same claims for another arm", extras=False)
    title, body = own.split("\n", 1)
    assert title == "## The same claims for another arm" and full.startswith("## The paper's claims")
    # the same rows and Holm family; only the regime, hard-subset and seed-age sections are left out
    full_body = full.split("\n", 1)[1]
    assert full_body.startswith(body) and len(full_body) > len(body)
