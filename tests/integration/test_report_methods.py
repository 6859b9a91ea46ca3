"""The run report shows what the run's method has: a GRPO run (on-policy) has no prefix or continuation
population, no prefix corpus sections and no prefix settings; a Thinking Seeds run keeps them. Populations
whose clip fraction is 0 at every iteration are left out of the clip plot and table, with the reason."""

from __future__ import annotations

import re

from tests.helpers.tiny import copy_run
from thinking_seeds.config import load_config
from thinking_seeds.evals.report import _merge_identical, write_report
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.sql import connect, run_named


def _settings(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("- settings: "))


def _never_clipped(run_id, base) -> list[str]:
    con = connect(run_id, base)
    try:
        rows = run_named(con, "clip_fraction").to_dicts()
    finally:
        con.close()
    pops = dict.fromkeys(r["population"] for r in rows)
    return [p for p in pops if all(not r["clipfrac"] for r in rows if r["population"] == p)]


def test_grpo_report_has_no_prefix_sections(tmp_path, tiny_overrides):
    cfg = load_config("tiny", [*tiny_overrides, "algorithm=grpo", "iterations=1"])
    train(RunDir.for_run("g", tmp_path), cfg)
    path = write_report("g", tmp_path)
    text = path.read_text()
    assert "### prefix_diversity" not in text and "### seeded_solve_rate" not in text
    assert "Prefix diversity" not in text and not (path.parent / "prefix_diversity.png").exists()
    assert "prefix." not in _settings(text) and "pool.size" in _settings(text)
    assert "prefix corpus:" not in text and "an on-policy method" in text
    header = next(line for line in text.splitlines() if line.startswith("| run_id | iteration | entropy_"))
    assert "entropy_on_policy" in header and "prefix" not in header and "continuation" not in header
    assert not re.search(r"\| g \| \d+ \| (prefix|continuation) \|", text)  # no such clip rows


def test_thinking_seeds_report_keeps_its_sections(tiny_run, tmp_path):
    run = copy_run(tiny_run.run, tmp_path)
    text = write_report(run.run_id, tmp_path).read_text()
    assert "### prefix_diversity" in text and "### seeded_solve_rate" in text and "prefix corpus" in text
    assert "prefix.ratio_min" in _settings(text) and "an on-policy method" not in text
    assert "entropy_prefix" in text and "entropy_continuation" in text
    never = _never_clipped(run.run_id, tmp_path)
    if never:
        assert f"Left out: {', '.join(never)}, whose clip fraction is 0 at every iteration" in text
    for p in never:
        assert not re.search(rf"\| {run.run_id} \| \d+ \| {p} \|", text), p


def test_identical_lines_are_drawn_once():
    acc = [(0, 0.25), (2, 0.5)]
    got = _merge_identical({"accuracy": acc, "pass@1": [(0, 0.25), (2, 0.5 + 1e-15)], "pass@2": [(0, 0.4), (2, 0.6)]})
    assert list(got) == ["accuracy = pass@1", "pass@2"]
    assert list(_merge_identical({"a": acc, "b": [(0, 0.25)]})) == ["a", "b"]  # other iterations: not the same line
