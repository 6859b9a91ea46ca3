"""`ts compare --no-final-test` must not read the test split in the comparison's own runs: the runs'
training jobs then carry no `--final-test` (a pilot or selection that reads test would spend it)."""

from __future__ import annotations

from pathlib import Path

from thinking_seeds.experiments import compare


def _captured(monkeypatch, final_test: bool) -> dict:
    seen: dict = {}

    def fake_run_all(specs, runs_dir, parallel=1, console=None, final_test=True, on_done=None):
        seen["final_test"] = final_test
        return []

    spec = compare.ComparisonSpec(methods=["grpo"], seeds=[0], final_test=final_test, control=False)
    monkeypatch.setattr(compare, "run_selection", lambda s, r, console=None: (s, None))
    monkeypatch.setattr(compare, "prepare", lambda s, r: [])
    monkeypatch.setattr(compare, "register", lambda *a, **k: None)
    monkeypatch.setattr(compare, "archiver", lambda *a, **k: None)
    monkeypatch.setattr(compare, "run_all", fake_run_all)
    monkeypatch.setattr(compare, "run_final_tests", lambda *a, **k: [])
    monkeypatch.setattr(compare, "write_report", lambda s, r: Path("report.md"))
    compare.run_comparison(spec)
    return seen


def test_no_final_test_reaches_the_runs(monkeypatch):
    assert _captured(monkeypatch, final_test=False)["final_test"] is False
    assert _captured(monkeypatch, final_test=True)["final_test"] is True
