"""thinking_seeds.evals.report: the Markdown report and its plots over a hand-made run (the report flow that
wraps it: tests/integration/test_report_flow.py)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.synthetic_run import make_run
from thinking_seeds.evals.report import PLOTS, format_cell, write_report
from thinking_seeds.store.parquet_io import DataError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    make_run(base, "syn")
    return base, write_report("syn", base)


def test_report_files(report):
    base, path = report
    assert path == base / "syn" / "reports" / "report.md"
    text = path.read_text()
    for stem in PLOTS:
        png = path.parent / f"{stem}.png"
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, stem
        assert f"]({stem}.png)" in text
    # atomic writes leave no temp files behind
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([f"{s}.png" for s in PLOTS] + ["report.md"])


def test_report_numbers_match_the_data(report):
    _, path = report
    text = path.read_text()
    assert "- iterations done: 3 of 3" in text
    assert "accuracy 0.3500 (best 0.3500)" in text
    # entropy_accuracy, iteration 1: entropy 2.0 - 0.1 (on_policy) ... and no eval at step 1
    assert "| syn | 1 | 1.9000 | 1.8900 | 1.8800 | 1.8700 | 1.8500 | 1.8400 | 1.8300 | 1.8200 | — | — |" in text
    assert "| 0.3500 | 1: 0.3500, 2: 0.4500, 16: 0.6200 |" in text
    # prefix_diversity, source age 1: 4 prefixes, 7 trigrams, 5 distinct
    assert "| syn | source_age | 1 | 4 | 3.2500 | 7 | 5 | 0.7143 |" in text
    # seeded_solve_rate: one whole off-policy sample, solved, vs on-policy 0.5 in its iteration
    assert "| syn | offpolicy_full | all | all | 1 | 1.0000 | 1.0000 | 0.5000 | 0.5000 |" in text
    # clip fraction, prefix population, iteration 2: 0.01 * 3 * 3
    assert "| syn | 2 | prefix | 0.0900 | 0.0450 |" in text
    for name in ("entropy_accuracy", "clip_fraction", "prefix_diversity", "seeded_solve_rate", "runs"):
        assert f"### {name}" in text


def test_report_of_an_empty_run(tmp_path):
    (tmp_path / "empty").mkdir()
    path = write_report("empty", tmp_path)
    text = path.read_text()
    assert "_no data yet_" in text
    assert not re.search(r"\]\(\w+\.png\)", text)
    assert not list(path.parent.glob("*.png"))
    with pytest.raises(DataError, match="no run 'missing'"):
        write_report("missing", tmp_path)


def test_format_cell():
    from decimal import Decimal

    assert format_cell(None) == "—"
    assert format_cell(0.123456) == "0.1235"
    assert format_cell(3) == "3"
    assert format_cell(Decimal("1.5")) == "1.5000"
    assert format_cell("0.3") == "0.3"
    assert format_cell({1: 0.5, 16: 1.0}) == "1: 0.5000, 16: 1.0000"
    assert format_cell(float("nan")) == "nan"


def test_the_report_shows_the_seeds_by_source_checkpoint_and_age(report):
    """Who wrote the seeds: PREFIXES has 4 seeds of θ_0 (iterations 1 and 2) and 2 of θ_1 (iteration 2),
    so two pool snapshots wrote seeds, at source ages 1-2; their continuations' solve rate is
    seeded_solve_rate's (θ_0: 2 of its 4 seeded samples solved)."""
    _, path = report
    text = path.read_text()
    section = text.split("### Seeds by source checkpoint")[1].split("\n### ")[0]
    assert "](seeds_by_source.png)" in section
    assert "Seeds from 2 source checkpoint(s) of the historical pool at source ages 1–2 iterations." in section
    assert "| θ_0 | 1–2 | 4 | 66.7% | 0.5000 |" in section and "| θ_1 | 1–1 | 2 | 33.3% |" in section
    assert "(seeds written by 2 of them)" in text
    # the diversity plot's right panel is by source age: prefix_diversity's source_age rows feed it
    assert "| syn | source_age | 1 |" in text and "| syn | source_age | 2 |" in text


def test_an_on_policy_run_has_no_seeds_section(tmp_path):
    make_run(tmp_path, "onp", algorithm="grpo")
    text = write_report("onp", tmp_path).read_text()
    assert (
        "Seeds by source checkpoint" not in text and not (tmp_path / "onp" / "reports" / "seeds_by_source.png").exists()
    )
