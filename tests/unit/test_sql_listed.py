"""`sql_files.listed`: the scandir listing behind every Parquet view finds exactly the files pathlib's
glob of the view's pattern finds, on a run with the odd things a real run directory can hold."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.synthetic_run import make_run
from thinking_seeds.store.sql_files import PARQUET_VIEWS, listed


def _odd_things(run: Path) -> None:
    (run / "metrics" / "iteration=0" / ".seeds.parquet.x1y2.tmp").write_bytes(b"torn")  # a killed writer's temp
    (run / "metrics" / "iteration=0" / "notes.txt").write_text("not parquet")
    (run / "metrics" / "iteration=x").mkdir()  # not an iteration number: glob still matches it
    (run / "metrics" / "iteration=x" / "late.parquet").write_bytes(b"PAR1")
    (run / "metrics" / "stray=3").mkdir()
    (run / "metrics" / "stray=3" / "s.parquet").write_bytes(b"PAR1")
    (run / "rollouts" / "iteration=99").write_text("a file where a folder belongs")
    (run / "corpus" / "prefixes" / "iteration=7").mkdir(parents=True, exist_ok=True)  # empty: no prefixes yet


def test_listed_finds_what_glob_finds(tmp_path):
    run = make_run(tmp_path, "syn").root
    _odd_things(run)
    for view, (pattern, _) in PARQUET_VIEWS.items():
        want = sorted(run.glob(pattern))
        assert want, f"the synthetic run has {view} files"
        assert sorted(listed(run, pattern)) == want, view


def test_listed_on_a_run_without_the_folder_and_on_other_patterns(tmp_path):
    assert listed(tmp_path, "metrics/iteration=*/*.parquet") == []
    (tmp_path / "checkpoints" / "step_1").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step_1" / "manifest.json").write_text("{}")
    assert listed(tmp_path, "checkpoints/step_*/manifest.json") == [tmp_path / "checkpoints/step_1/manifest.json"]
