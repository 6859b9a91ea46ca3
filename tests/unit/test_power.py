"""The paired t-test's numbers behind `ts compare --plan` and the claims' p-values (power.py)."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from thinking_seeds.experiments.power import min_detectable_effect, noncentral_t_power, paired_t_p, t_cdf, t_ppf
from thinking_seeds.flows.cli import app


def test_mde_matches_the_issue_figures():
    # Issue #26: the paired TS − GRPO difference has sd 0.029; 80% power, two-sided alpha 0.05.
    assert 100 * min_detectable_effect(0.029, 5) == pytest.approx(4.9, abs=0.05)
    assert 100 * min_detectable_effect(0.029, 10) == pytest.approx(2.9, abs=0.05)
    assert 100 * min_detectable_effect(0.029, 20) == pytest.approx(1.9, abs=0.05)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        min_detectable_effect(0.029, 1)


def test_student_t_against_table_values():
    assert t_ppf(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert t_ppf(0.975, 1) == pytest.approx(12.7062, abs=1e-3)
    assert t_ppf(0.975, 30) == pytest.approx(2.0423, abs=1e-4)
    assert t_cdf(2.0, 10) == pytest.approx(0.96331, abs=1e-5)
    assert t_cdf(-1.0, 3) == pytest.approx(1 - 0.80450, abs=1e-5)


def test_noncentral_power_is_alpha_at_zero_and_normal_for_large_df():
    for df in (1, 4, 19):
        assert noncentral_t_power(0.0, df, t_ppf(0.975, df)) == pytest.approx(0.05, abs=1e-6)
    # df -> infinity: T' -> Z + delta, so power -> Φ(delta − 1.96) + Φ(−delta − 1.96)
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))  # noqa: E731
    got = noncentral_t_power(2.8, 5000, t_ppf(0.975, 5000))
    assert got == pytest.approx(phi(2.8 - 1.96) + phi(-2.8 - 1.96), abs=2e-3)


def test_paired_t_p_values():
    # The plateau comparison's per-seed differences (docs/results/countdown-plateau).
    assert paired_t_p([-0.036, -0.020, 0.002, 0.020, -0.053]) == pytest.approx(0.254, abs=0.002)
    assert paired_t_p([0.009, 0.011, 0.017, 0.012, 0.012]) < 0.001
    assert math.isnan(paired_t_p([0.1])) and paired_t_p([0.0, 0.0]) == 1.0 and paired_t_p([0.1, 0.1]) == 0.0


def test_scipy_agrees_when_installed(monkeypatch):
    pytest.importorskip("scipy")
    from thinking_seeds.experiments import power

    with_scipy = min_detectable_effect(0.029, 5)
    monkeypatch.setattr(power, "_have_scipy", lambda: False)
    assert min_detectable_effect(0.029, 5) == pytest.approx(with_scipy, rel=1e-4)


def test_ts_compare_plan_prints_the_mde_and_trains_nothing(tmp_path):
    runner = CliRunner()
    r = runner.invoke(
        app,
        ["--runs-dir", str(tmp_path / "runs"), "compare", "--methods", "grpo:0-4,thinking_seeds:0-4", "--plan"]
        + ["--plan-sd", "0.029", "--out", str(tmp_path / "out")],
    )
    assert r.exit_code == 0, r.output
    assert "    5  4.9  <- this comparison" in r.output and "   20  1.9" in r.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()
    r = runner.invoke(app, ["compare", "--methods", "grpo,thinking_seeds", "--plan"])
    assert r.exit_code == 2 and "--plan-from" in r.output
    r = runner.invoke(app, ["compare", "--methods", "grpo,luffy", "--primary", "thinking_seeds-grpo", "--plan"])
    assert r.exit_code == 2 and "thinking_seeds is not among the compared methods" in r.output
