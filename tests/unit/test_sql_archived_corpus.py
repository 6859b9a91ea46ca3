"""An archived run (docs/results/<id>/runs/<run>: the corpus in one `iteration=all` file, what `ts compare
--archive` commits) is read by the corpus_files view as iteration -1, as before the roll-ups: a
comparison restored from its archive writes its report through this view (tests/e2e/test_committed_reports.py
rebuilds them all; this is the fast check)."""

import shutil
from pathlib import Path

import pyarrow.parquet as pq

from thinking_seeds.store.sql_tables import corpus_files

ARCHIVED = Path(__file__).resolve().parents[2] / "docs/results/countdown-credit/runs"


def test_an_archived_runs_corpus_is_one_file_of_iteration_minus_one(tmp_path):
    src = sorted(ARCHIVED.iterdir())[0]
    run = tmp_path / "runs" / src.name
    shutil.copytree(src, run)
    damaged: list[str] = []
    table = corpus_files([run], damaged).to_pylist()
    corpus = run / "corpus/prefixes/iteration=all/prefixes.parquet"
    assert not damaged
    assert [(r["run_id"], r["view"], r["iteration"], r["rows"]) for r in table] == [
        (src.name, "prefixes", -1, pq.ParquetFile(corpus).metadata.num_rows)
    ]
