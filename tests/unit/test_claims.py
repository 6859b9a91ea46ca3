"""The claims table of a comparison report: intervals, verdicts, the hard subset, the regime rows."""

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thinking_seeds.experiments.claims import claims_markdown, hard_subset_stats, mean_ci, t_quantile_975, verdict


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
    assert "holds" in lines["1. beats GRPO on pass@1"] and "+0.0500" in lines["1. beats GRPO on pass@1"]
    assert "inconclusive" in lines["2. higher effective entropy"]  # identical everywhere: zero spread
    assert "| holds" in lines["3. less gradient lost to clipping"]
    assert "2 hard prompts" in md and "share of the 2 hard prompts" in md
    # hard prompts p1, p2: grpo solves p2 only (0.5), thinking_seeds both (1.0)
    assert per_run["c-thinking_seeds-s0"]["hard/ever_solved"] == 1.0 and per_run["c-grpo-s0"]["hard/ever_solved"] == 0.5
    assert "age=20-49" in md and "The regime" in md


def test_a_looser_hard_subset_is_shown_beside_the_claims_subset(tmp_path):
    # θ_0 solves p0 6/8, p1 0/8 (< 10%), p2 1/8 (< 25% only): the claims keep p1; a second table adds p2.
    members, per_run = [], {}
    for method in ("grpo", "thinking_seeds"):
        for seed in range(2):
            rid = f"c-{method}-s{seed}"
            members.append({"run_id": rid, "method": method, "seed": seed})
            per_run[rid] = {"test/accuracy": 0.5, "test/pass@8": 0.9}
            _per_prompt(
                tmp_path / rid / "evals" / "final-test" / "step_000100.parquet",
                [8, 0, 2] if method == "grpo" else [8, 1, 0],
            )
    _per_prompt(tmp_path / "c-grpo-s0" / "evals" / "final-test" / "step_000000.parquet", [6, 0, 1])
    variants = {m: [f"c-{m}-s{s}" for s in range(2)] for m in ("grpo", "thinking_seeds")}
    data = {"members": members, "per_run": per_run, "base_test": {"test/accuracy": 0.25, "test/pass@8": 0.55}}
    md = claims_markdown(data, variants, tmp_path)
    assert "share of the 1 hard prompts" in md  # the claims table keeps the < 10% subset
    assert "### The hard subset: 1 test prompts θ_0 solves in < 10% of 8 samples" in md
    assert "### The hard subset: 2 test prompts θ_0 solves in < 25% of 8 samples (beside the claims" in md
    assert per_run["c-grpo-s0"]["hard/ever_solved"] == 0.0 and per_run["c-grpo-s0"]["hard25/ever_solved"] == 0.5
    assert per_run["c-thinking_seeds-s1"]["hard25/accuracy"] == pytest.approx(1 / 16)
    assert data["base_test"]["hard25/accuracy"] == pytest.approx(1 / 16)
