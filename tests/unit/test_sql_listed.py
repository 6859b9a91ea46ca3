"""`sql_files.listed`: the scandir listing behind every Parquet view finds exactly the files pathlib's
glob of the view's pattern finds (as path strings), on a run with the odd things a real run directory
can hold; `file_order` orders path strings as it orders Paths."""

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
        want = sorted(str(f) for f in run.glob(pattern))
        assert want, f"the synthetic run has {view} files"
        assert sorted(listed(run, pattern)) == want, view


def test_listed_on_a_run_without_the_folder_and_on_other_patterns(tmp_path):
    assert listed(tmp_path, "metrics/iteration=*/*.parquet") == []
    (tmp_path / "checkpoints" / "step_1").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step_1" / "manifest.json").write_text("{}")
    assert listed(tmp_path, "checkpoints/step_*/manifest.json") == [str(tmp_path / "checkpoints/step_1/manifest.json")]


def test_file_order_of_strings_is_the_order_of_paths(tmp_path):
    from thinking_seeds.store.sql_files import file_order

    files = [
        tmp_path / "r" / "metrics" / "iteration=10" / "a.parquet",
        tmp_path / "r" / "metrics" / "iteration=9" / "b.parquet",
        tmp_path / "r" / "compacted" / "metrics" / "iterations=000000-000099.parquet",
        tmp_path / "q" / "metrics" / "iteration=2" / "a.parquet",
    ]
    by_path = [str(f) for f in sorted(files, key=file_order)]
    assert sorted((str(f) for f in files), key=file_order) == by_path
    assert by_path[1:] == [str(files[2]), str(files[1]), str(files[0])]  # run r: the part at 0, then 9 before 10
