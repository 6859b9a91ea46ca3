"""The readings a reviewer asks of a claims table: every endpoint at equal iterations, matched-pass@1
rows at every candidate pair within one standard error, the primary endpoint's one-sided bounds, and
θ_0's own sampling noise in the rows against θ_0. Hand-made data, no training."""

from __future__ import annotations

import math
import statistics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thinking_seeds.config import load_config, save_config
from thinking_seeds.experiments.base_noise import against_base, base_sampling_sd
from thinking_seeds.experiments.claims import claims_markdown, claims_rows, primary_bound_lines
from thinking_seeds.experiments.compare_data import collect
from thinking_seeds.experiments.equal_iterations import equal_iterations_lines
from thinking_seeds.experiments.equal_reading import equal_pair
from thinking_seeds.experiments.matched import candidate_matches
from thinking_seeds.experiments.members import write_marker
from thinking_seeds.experiments.power import paired_t_p
from thinking_seeds.pipeline.checkpoint_eval import EQUAL_ITERATIONS_STAGE, FINAL_TEST_STAGE
from thinking_seeds.store.run_dir import RunDir

SEEDS = (0, 1, 2, 3)


def _data(grpo_iterations: int = 185, with_equal: bool = True):
    """grpo trains `grpo_iterations`, thinking_seeds 150. At the ends TS − GRPO on test pass@1 is
    +0.02 + 0.001 s; GRPO's θ_150 is 0.03 below its end, so at equal iterations it is +0.05 + 0.001 s."""
    members, per_run, configs = [], {}, {}
    for method, n in (("grpo", grpo_iterations), ("thinking_seeds", 150)):
        for s in SEEDS:
            rid = f"c-{method}-s{s}"
            members.append({"run_id": rid, "method": method, "seed": s})
            configs[rid] = {"iterations": n}
            ts = method == "thinking_seeds"
            per_run[rid] = {"test/accuracy": 0.30 + (0.02 + 0.001 * s if ts else 0.0), "test/pass@8": 0.7}
            if not ts and with_equal and n > 150:
                per_run[rid] |= {"equal_step": 150.0, "equal/test/accuracy": 0.27}
    variants = {m: [f"c-{m}-s{s}" for s in SEEDS] for m in ("grpo", "thinking_seeds")}
    return {"members": members, "per_run": per_run, "configs": configs, "base_test": {}, "curves": {}}, variants


def test_every_row_is_also_read_at_equal_iterations_against_the_longer_arms_earlier_checkpoint(tmp_path):
    data, variants = _data()
    eq = equal_pair(data, variants, "thinking_seeds", "grpo", "test/accuracy")
    assert eq.step == 150 and eq.longer == "grpo"
    assert [d for _, d in eq.diffs] == pytest.approx([0.05 + 0.001 * s for s in SEEDS])
    row = claims_rows(data, variants, None)[0]
    assert [d for _, d in row["diffs"]] == pytest.approx([0.02 + 0.001 * s for s in SEEDS])  # the ends, as before
    assert row["equal_ci"][0] == pytest.approx(0.0515)
    assert row["equal_p"] == pytest.approx(paired_t_p([0.05 + 0.001 * s for s in SEEDS]))
    md = claims_markdown(data, variants, tmp_path)
    line = next(x for x in md.splitlines() if x.startswith("| 1. beats GRPO"))
    assert line.rstrip(" |").endswith("n 4") and "+0.0515 [" in line  # both readings on the row
    # a metric θ_150 was not evaluated on has no equal reading, and the row says so
    miss = equal_pair(data, variants, "thinking_seeds", "grpo", "test/pass@8")
    assert miss.diffs == []
    assert "— (no θ_150 value of grpo)" in md
    # equal iteration counts: the row is that reading already
    same, v = _data(grpo_iterations=150)
    assert equal_pair(same, v, "thinking_seeds", "grpo", "test/accuracy") is None
    assert "the same (equal iterations)" in claims_markdown(same, v, tmp_path)


def test_a_protocol_may_register_the_equal_iterations_reading_as_the_rows_own(tmp_path):
    """--reading equal_iterations: GRPO's θ_150 against TS's end is each row's difference, p and Holm
    verdict (and the primary endpoint's bounds); the compute-matched ends move to the last column."""
    data, variants = _data()
    ends = [0.02 + 0.001 * s for s in SEEDS]
    equal = [0.05 + 0.001 * s for s in SEEDS]
    row = claims_rows(data, variants, None, reading="equal_iterations")[0]
    assert [d for _, d in row["diffs"]] == pytest.approx(equal)
    assert row["p"] == pytest.approx(paired_t_p(equal)) and row["n"] == 4
    assert row["equal_ci"][0] == pytest.approx(0.0215) and row["equal_p"] == pytest.approx(paired_t_p(ends))
    assert "(at equal iterations: grpo at θ_150)" in row["measurement"] and row["verdict"] == "holds"
    assert primary_bound_lines(row, "Primary endpoint")[0].count("+0.0515") == 1
    md = claims_markdown(data, variants, tmp_path, reading="equal_iterations", primary="Primary endpoint")
    assert "at the runs' ends (compute matched): difference [95% CI], p" in md
    assert "registered the equal-iterations reading" in md
    line = next(x for x in md.splitlines() if x.startswith("| 1. beats GRPO"))
    assert line.index("+0.0515 [") < line.index("+0.0215 [")  # registered reading first, then the ends
    # a metric GRPO's θ_150 was not tested on: no registered value (n 0, inconclusive), the ends beside it
    pass8 = next(
        r for r in claims_rows(data, variants, None, reading="equal_iterations") if "pass@8" in r["measurement"]
    )
    assert pass8["n"] == 0 and pass8["verdict"].startswith("inconclusive")
    # arms of equal iterations: both readings are one, the table is the default one
    same, v = _data(grpo_iterations=150)
    assert claims_rows(same, v, None, reading="equal_iterations")[0]["diffs"] == claims_rows(same, v, None)[0]["diffs"]


def test_the_equal_iterations_table_prints_both_readings_of_every_endpoint():
    data, variants = _data()
    md = "\n".join(equal_iterations_lines(data, variants, "grpo", ["thinking_seeds"]))
    assert "grpo at θ_150" in md
    row = next(x for x in md.splitlines() if x.startswith("| thinking_seeds − grpo | test pass@1 |"))
    assert "+0.0215 [" in row and "+0.0515 [" in row  # the ends, then equal iterations
    assert "— (not evaluated)" in next(x for x in md.splitlines() if "test pass@8" in x)
    none, v = _data(with_equal=False)
    assert equal_iterations_lines(none, v, "grpo", ["thinking_seeds"]) == []


def test_collect_reads_the_longer_arms_values_at_its_equal_iterations_step(tmp_path):
    """From run files: the equal-iterations test, the evaluation at that step, and the actor metrics of the
    `last` iterations before it (as the final reading takes the last iterations before the end)."""
    cfg = load_config("tiny", ["iterations=6", "algorithm=grpo", "seed=0"])
    run = RunDir.for_run("c-grpo-s0", tmp_path)
    write_marker(run.root, {"compare_id": "c", "run_id": run.run_id, "method": "grpo", "seed": 0, "sweep": {}})
    save_config(cfg, run.config_path)
    for k in range(6):
        run.write_metrics(k, "update", {"actor/effective_entropy/all": float(k)})
    run.write_metrics(4, "evaluate", {"eval/accuracy": 0.4})
    run.write_metrics(6, "evaluate", {"eval/accuracy": 0.6})
    run.write_metrics(6, FINAL_TEST_STAGE, {"eval/accuracy": 0.61})
    run.write_metrics(4, EQUAL_ITERATIONS_STAGE, {"eval/accuracy": 0.41})
    v = collect("c", tmp_path, last=2)["per_run"]["c-grpo-s0"]
    assert v["equal_step"] == 4 and v["equal/test/accuracy"] == pytest.approx(0.41)
    assert v["equal/eval/accuracy"] == pytest.approx(0.4) and v["eval/accuracy"] == pytest.approx(0.6)
    assert v["equal/actor/effective_entropy/all"] == pytest.approx(2.5)  # iterations 2, 3 (before θ_4)
    assert v["actor/effective_entropy/all"] == pytest.approx(4.5)  # iterations 4, 5 (the last 2)


def _curves_data(ts_curve, grpo_curve, jitter):
    """Validation pass@1 curves per seed: `ts_curve[step]` + jitter[s] (TS) and `grpo_curve[step]` (GRPO);
    distinct patterns: TS above GRPO by +0.1 at θ_100, below by −0.1 at θ_150."""
    members, curves = [], {}
    for s, j in enumerate(jitter):
        for m, curve in (("thinking_seeds", ts_curve), ("grpo", grpo_curve)):
            rid = f"c-{m}-s{s}"
            members.append({"run_id": rid, "method": m, "seed": s})
            acc = {st: v + (j if m == "thinking_seeds" else 0.0) for st, v in curve.items()}
            pat = {
                st: 1.0 + (0.1 if st == 100 else -0.1 if st == 150 else 0.0) * (m == "thinking_seeds") for st in curve
            }
            pat = {st: v + 0.001 * s for st, v in pat.items()}
            curves[rid] = {"eval/accuracy": sorted(acc.items()), "eval/distinct_patterns": sorted(pat.items())}
    variants = {m: [f"c-{m}-s{s}" for s in range(len(jitter))] for m in ("thinking_seeds", "grpo")}
    per_run = {r: {} for r in curves}
    return {"members": members, "per_run": per_run, "curves": curves, "base_test": {}, "configs": {}}, variants


def test_a_matched_row_reads_every_candidate_pair_within_one_standard_error():
    jitter = [-0.006, -0.002, 0.002, 0.006]  # sd 0.00516, SE 0.00258 of the per-seed gaps
    se = statistics.stdev(jitter) / math.sqrt(len(jitter))
    # TS θ_100 0.300 and θ_150 0.302 both match GRPO θ_50 0.301 within one SE; TS θ_50 0.25 matches nothing
    data, variants = _curves_data({50: 0.25, 100: 0.300, 150: 0.302}, {50: 0.301, 100: 0.35}, jitter)
    cands = candidate_matches(data, variants, "thinking_seeds", "grpo")
    assert [(m.step_a, m.step_b) for m in cands] == [(150, 50), (100, 50)]  # equal gaps: the later step first
    assert all(m.se == pytest.approx(se) and abs(m.gap) <= m.se for m in cands)
    rows = [r for r in claims_rows(data, variants, None) if "matched" in r["measurement"]]
    assert len(rows) == 1  # distinct patterns (the only curve with a value at both pairs)
    r = rows[0]
    assert [round(ci[0], 6) for _, ci, _ in r["pairs"]] == [-0.1, 0.1]  # −0.1 at (150, 50), +0.1 at (100, 50)
    assert r["p"] == 1.0 and r["verdict"] == "inconclusive"  # the pairs disagree in sign: no claim either way
    assert "2 pair(s)" in r["measurement"] and "θ_100 vs θ_50" in r["measurement"]


def test_a_matched_row_takes_the_largest_p_of_its_pairs_and_is_left_out_without_a_candidate():
    jitter = [-0.006, -0.002, 0.002, 0.006]
    data, variants = _curves_data({100: 0.300, 150: 0.302}, {50: 0.301}, jitter)
    for rid, c in data["curves"].items():  # TS above GRPO at both pairs, by different amounts per seed
        if "thinking_seeds" in rid:
            s = int(rid[-1])
            c["eval/distinct_patterns"] = [(100, 1.2 + 0.01 * s), (150, 1.1 + 0.03 * s)]
    r = next(r for r in claims_rows(data, variants, None) if "matched" in r["measurement"])
    assert r["p"] == pytest.approx(max(p for _, _, p in r["pairs"])) and r["p"] > min(p for _, _, p in r["pairs"])
    far, v = _curves_data({100: 0.2, 150: 0.22}, {50: 0.3}, jitter)  # every gap far beyond one SE
    assert candidate_matches(far, v, "thinking_seeds", "grpo") == []
    assert not [r for r in claims_rows(far, v, None) if "matched" in r["measurement"]]


def test_the_primary_endpoint_carries_its_one_sided_bounds():
    diffs = [0.0, -0.03, -0.011, -0.012, 0.005, -0.012, -0.023, 0.006, -0.017, 0.042]
    r = {"measurement": "test accuracy, a − b", "diffs": list(enumerate(diffs)), "ci": (statistics.fmean(diffs), 0, 0)}
    (line, _) = primary_bound_lines(r, "Primary endpoint")
    assert line.startswith("Primary endpoint: test accuracy, a − b, -0.0052 [")
    m, se = statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    upper, lower = m + 1.833113 * se, m - 1.833113 * se  # t(0.95, 9)
    assert f"below {upper:+.4f} and above {lower:+.4f}" in line
    assert f"a gain larger than {100 * upper:.1f} points" in line and f"sd {statistics.stdev(diffs):.4f}" in line
    assert primary_bound_lines({"measurement": "x", "diffs": [(0, 0.1)], "ci": None}, "P") == []


def _theta0_rows(correct, n=64):
    return {f"p{i}": {"n": n, "correct": c} for i, c in enumerate(correct)}


def test_theta0_sampling_sd_matches_the_posterior_predictive_variance():
    rows = _theta0_rows([16] * 200)  # every prompt 16 of 64
    a, b, n = 16.5, 48.5, 64  # Jeffreys posterior of each prompt's rate
    mean_p, var_p = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    per_prompt = (mean_p * (1 - mean_p) - var_p) / n + var_p  # Var(k/n) with p ~ Beta, k ~ Bin(n, p)
    assert base_sampling_sd(rows, "test/accuracy") == pytest.approx(math.sqrt(per_prompt / 200), rel=0.08)
    # pass@64 moves most through prompts θ_0 solved rarely: never-solved prompts keep a chance
    rare = base_sampling_sd(_theta0_rows([0] * 100 + [64] * 100), "test/pass@64")
    assert rare > 0.01 and base_sampling_sd(_theta0_rows([64] * 200), "test/pass@64") < rare
    assert base_sampling_sd(rows, "test/distinct_patterns") is None and base_sampling_sd(None, "test/accuracy") is None


def test_a_row_against_theta0_widens_by_theta0s_sampling_sd(tmp_path):
    ci, p = against_base([-0.07] * 10, 0.018)  # no spread over seeds: all the uncertainty is θ_0's
    assert ci[2] - ci[0] == pytest.approx(2.262157 * 0.018, rel=1e-4)  # t(0.975, 9) · sd₀
    assert 0.001 < p < 0.01
    data, variants = _data(grpo_iterations=150)
    for s in SEEDS:
        data["per_run"][f"c-thinking_seeds-s{s}"]["test/pass@8"] = 0.70 + 0.001 * s
    data["base_test"] = {"test/pass@8": 0.75}
    path = tmp_path / "c-grpo-s0" / "evals" / "final-test" / "step_000000.parquet"
    path.parent.mkdir(parents=True)
    rows = [{"step": 0, "mode": "plain", "prompt_id": f"p{i}", "n": 8, "correct": i % 3} for i in range(30)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    md = claims_markdown(data, variants, tmp_path)
    line = next(x for x in md.splitlines() if "θ_0 (0.7500 ±" in x)
    sd0 = base_sampling_sd({r["prompt_id"]: r for r in rows}, "test/pass@8")
    assert f"± {sd0:.4f} sampling sd" in line
    plain_half = 3.182446 * statistics.stdev([0.001 * s for s in SEEDS]) / 2  # t(0.975, 3) · s/√4
    lo = float(line.split(" | ")[2].split("[")[1].split(",")[0])
    assert -0.0485 - lo > 2 * plain_half  # wider than the t-interval that takes θ_0 as exact
    assert "(sampling sd)" in md  # the regime table shows θ_0 with its sd too
