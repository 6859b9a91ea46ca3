"""store/compaction.py: finished iterations' metrics files copied into a few parts that `ts sql`
reads instead, only while the files they copy are unchanged; the originals are never touched."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.synthetic_run import snapshot_files
from thinking_seeds.store import compaction
from thinking_seeds.store.compaction import COMPACTED, compact, parts
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.sql import connect, query, run_named

ITERATIONS = 25  # blocks of 10: 0-9 and 10-19 are finished once iteration 20 has started; 20-24 are not


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(compaction, "BLOCK", 10)


def _run(base, run_id="c", iterations=ITERATIONS) -> RunDir:
    run = RunDir.for_run(run_id, base)
    for k in range(iterations):
        run.write_metrics(k, "update", {"actor/entropy/all": 2.0 - k / 100, "actor/pg_clipfrac/all": k / 1000})
        run.write_metrics(k, "verify", {"reward/mean": k / 50})
        run.write_manifest(Manifest("evaluate", k, "h"))
        if k % 10 == 9:
            run.write_metrics(k + 1, "evaluate", {"eval/accuracy": k / 30})
    return run


ALL = "SELECT * FROM metrics"
SORTED = "SELECT * FROM metrics ORDER BY iteration, stage, name"


def _rows(base, sql, run_id="c"):
    con = connect(run_id, base, views={"metrics"})
    try:
        return query(con, sql).rows
    finally:
        con.close()


def test_parts_replace_the_files_they_copy(tmp_path):
    run = _run(tmp_path)
    before_files = snapshot_files(run.root)
    want_all, want_sorted = _rows(tmp_path, ALL), _rows(tmp_path, SORTED)

    written = compact(run.root)

    assert [p.name for p in written] == ["iterations=000000-000009.parquet", "iterations=000010-000019.parquet"]
    assert {k: v for k, v in snapshot_files(run.root).items() if not k.startswith(COMPACTED)} == before_files
    p0 = parts(run.root, "metrics")[0]
    assert len(p0.sources) == 10 * 2  # update + verify of iterations 0-9 (evaluate k=9 wrote into iteration=10)
    assert all(rel.startswith("metrics/iteration=") for rel in p0.sources)
    # the same rows, in the same order even without ORDER BY (iterations in order, parts in place)
    assert _rows(tmp_path, SORTED) == want_sorted
    assert _rows(tmp_path, ALL) == want_all
    con = connect("c", tmp_path)
    assert run_named(con, "entropy_accuracy").rows  # the named queries read parts like files
    con.close()
    assert compact(run.root) == []  # up to date: nothing written


def test_unfinished_iterations_are_not_compacted(tmp_path):
    run = _run(tmp_path, iterations=19)  # iteration 18 started: block 10-19 is not over
    assert [p.first for p in (parts(run.root, "metrics") or [])] == []
    compact(run.root)
    assert [p.first for p in parts(run.root, "metrics")] == [0]


def test_a_changed_or_added_file_is_read_as_it_is_now(tmp_path):
    run = _run(tmp_path)
    compact(run.root)
    # a stage redone (its file rewritten), and a later `ts eval` adding a file to a compacted folder
    run.write_metrics(3, "verify", {"reward/mean": 99.0})
    run.write_metrics(5, "evaluate-validation", {"eval/accuracy": 0.5})
    rows = _rows(tmp_path, "SELECT iteration, stage, value FROM metrics WHERE iteration IN (3, 5) ORDER BY ALL")
    assert (3, "verify", 99.0) in rows and (5, "evaluate-validation", 0.5) in rows
    assert (3, "verify", 3 / 50) not in rows
    stale = parts(run.root, "metrics")[0]
    assert not stale.fresh(run.root) and parts(run.root, "metrics")[1].fresh(run.root)
    now = _rows(tmp_path, SORTED)
    # running it again refreshes only that part, which then holds both files and reads the same
    assert [p.name for p in compact(run.root)] == ["iterations=000000-000009.parquet"]
    fresh = parts(run.root, "metrics")[0]
    assert fresh.fresh(run.root) and "metrics/iteration=5/evaluate-validation.parquet" in fresh.sources
    assert _rows(tmp_path, SORTED) == now


def test_resumable_and_a_torn_part_is_ignored(tmp_path):
    run = _run(tmp_path)
    want = _rows(tmp_path, SORTED)
    compact(run.root)
    first, second = (p.path for p in parts(run.root, "metrics"))
    second.unlink()  # as if killed before the second part was written
    first.write_bytes(b"PAR1 torn")  # and something tore the first (parts are written atomically)
    damaged: list[str] = []
    con = connect("c", tmp_path, damaged=damaged, views={"metrics"})
    assert query(con, SORTED).rows == want and damaged == []  # a bad part is a cache miss, not damage
    con.close()
    assert sorted(p.name for p in compact(run.root)) == [first.name, second.name]
    assert _rows(tmp_path, SORTED) == want


def test_ts_compact(tmp_path):
    _run(tmp_path)
    env = dict(os.environ, TS_RUNS_DIR=str(tmp_path))
    code = (
        "import sys; from thinking_seeds.store import compaction; compaction.BLOCK = 10; "
        "from thinking_seeds.flows.cli import app; sys.argv = ['ts', 'compact', 'c']; app()"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"2 part(s) written under {tmp_path / 'c' / COMPACTED}" in out.stdout
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == (
        "up to date: 2 finished block(s) of 10 iterations compacted (0-19); "
        "iterations 20-24 are read as they are until iteration 30 starts"
    )
    code = code.replace("'compact', 'c'", "'compact', 'nope'")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "no run 'nope'" in out.stderr


def test_the_runs_owner_leaves_a_compaction_in_progress_alone(tmp_path):
    """`ts compact` writes without owning the run: its temp files are not the owner's to clean."""
    run = _run(tmp_path)
    compact(run.root)
    in_progress = run.root / COMPACTED / "metrics" / ".iterations=000020-000029.parquet.abc123.tmp"
    in_progress.write_bytes(b"half")
    killed_stage = run.root / "metrics" / "iteration=3" / ".update.parquet.abc123.tmp"
    killed_stage.write_bytes(b"half")
    assert run.stale_temps() == [killed_stage]


# ---------------------------------------------------------------------------------------------
# ngram_counts: the prefix corpus's 3-grams, deduplicated per (iteration, source age, length bucket)
# ---------------------------------------------------------------------------------------------

TEXTS = ["b 8+3=11,11-4=7", "a 5-2=3", "héllo→wörld", "", "ab", "abcab", "19+12=31,31-7=24"]


def _with_prefixes(base, run_id="p", old=frozenset({0, 1, 2, 13})) -> RunDir:
    """_run plus a prefix file per iteration (iterations in `old` in the format from before the
    derived columns), texts repeating so that a part has 3-grams to deduplicate."""
    import pyarrow as pa

    from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA, PREFIX_SCHEMA, with_derived_prefix_columns

    run = _run(base, run_id)
    for k in range(ITERATIONS):
        rows = []
        for j in range(9):
            text = TEXTS[(k + j) % len(TEXTS)]
            step = [0, max(0, k - 3), max(0, k - 1)][j % 3]
            rows.append(
                {
                    "run_id": run_id,
                    "iteration": k,
                    "prompt_id": f"p{j % 4}",
                    "seed_id": f"{k}-{j}",
                    "source_step": step,
                    "source_age": k - step,
                    "prefix_ratio": 0.5,
                    "prefix_token_ids": list(range(len(text) // 2 + j)),
                    "behaviour_logprobs": [-0.5] * (len(text) // 2 + j),
                    "prefix_text": text,
                    "draft_len": 40,
                    "draft_reward": None,
                }
            )
        t = pa.Table.from_pylist(rows, schema=PREFIX_SCHEMA)
        if k in old:
            write_table_atomic(t, run.prefixes(k), schema=PREFIX_SCHEMA)
        else:
            write_table_atomic(with_derived_prefix_columns(t), run.prefixes(k), schema=PREFIX_FILE_SCHEMA)
    return run


DIVERSITY = ("prefix_diversity", "prefix_diversity_history")
BY_KEY = "SELECT iteration, source_age, len_lo, ngram, sum(prefixes) FROM ngram_counts GROUP BY ALL ORDER BY ALL"


def _named(base, run_id="p"):
    con = connect(run_id, base)
    try:
        return [run_named(con, n).rows for n in DIVERSITY] + [query(con, BY_KEY).rows]
    finally:
        con.close()


def test_ngram_parts_count_what_the_prefixes_hold(tmp_path):
    run = _with_prefixes(tmp_path)
    before_files = snapshot_files(run.root)
    want = _named(tmp_path)
    written = compact(run.root)
    ngram_parts = parts(run.root, "ngram_counts")
    assert [p.first for p in ngram_parts] == [0, 10] and all(p.fresh(run.root) for p in ngram_parts)
    assert {p.path for p in ngram_parts} <= set(written)
    assert {k: v for k, v in snapshot_files(run.root).items() if not k.startswith(COMPACTED)} == before_files
    assert _named(tmp_path) == want  # parts (old and new prefix files inside) read as the files do
    con = connect("p", tmp_path)
    stored = query(con, "SELECT count(*) FROM ngram_counts WHERE iteration < 20").rows[0][0]
    raw = query(con, "SELECT sum(len(prefix_ngrams)) FROM prefixes WHERE iteration < 20").rows[0][0]
    con.close()
    assert stored < raw  # deduplicated: fewer rows than the prefixes' 3-grams
    # a seeds stage redone: its new file is read as it is, the stale part no longer stands for it
    import pyarrow.parquet as pq

    t = pq.read_table(run.prefixes(4))
    # as a stage writes (a new file renamed over the old one): an in-place rewrite of a folder the part
    # vouches for is not noticed (compaction.FOLDERS)
    write_table_atomic(t.slice(0, 3), run.prefixes(4), schema=t.schema)
    now = _named(tmp_path)
    assert now != want and not parts(run.root, "ngram_counts")[0].fresh(run.root)
    shutil_copy = tmp_path / "fresh"
    import shutil

    shutil.copytree(run.root, shutil_copy / "p", ignore=shutil.ignore_patterns(COMPACTED))
    assert now == _named(shutil_copy)  # what the files say, with no part at all
    compact(run.root)
    assert _named(tmp_path) == now


def test_a_part_keeps_its_record_once_and_one_written_with_two_copies_is_made_again(tmp_path):
    """A part's footer holds its record of files once (no ARROW:schema, which would hold it again,
    base64-encoded: a footer of the 1M-prefix bench run read ~6x slower); one written so before is made
    again by the next compaction, and every answer stays the files' answer."""
    import pyarrow.parquet as pq

    run = _run(tmp_path)
    want = _rows(tmp_path, SORTED)
    compact(run.root)
    p0 = parts(run.root, "metrics")[0]
    meta = pq.read_metadata(p0.path).metadata
    assert b"ARROW:schema" not in meta and meta[b"thinking_seeds.compacted_from"] == p0.recorded
    assert p0.lean and p0.schema.names == ["run_id", "iteration", "stage", "name", "value"]
    assert _rows(tmp_path, SORTED) == want
    # the same part as the code before wrote it: its schema metadata (the record) copied into ARROW:schema
    table = pq.read_table(p0.path)
    write_table_atomic(table.replace_schema_metadata(meta), p0.path)
    old = parts(run.root, "metrics")[0]
    assert not old.lean and b"ARROW:schema" in pq.read_metadata(old.path).metadata
    assert old.fresh(run.root) and _rows(tmp_path, SORTED) == want  # still read while it stands
    assert [p.name for p in compact(run.root)] == [p0.path.name]  # made again, lean
    assert parts(run.root, "metrics")[0].lean and _rows(tmp_path, SORTED) == want


def test_parts_are_not_read_through_links(tmp_path):
    """A part that is a link, or a compacted folder that leads out of the run, is not read: the files
    answer (parts are a cache of them); nothing outside the run is opened."""
    run = _run(tmp_path)
    want = _rows(tmp_path, SORTED)
    compact(run.root)
    first = parts(run.root, "metrics")[0].path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = elsewhere / first.name
    first.rename(moved)
    first.symlink_to(moved)  # a part that is a link (to a real part): passed over
    assert [p.first for p in parts(run.root, "metrics")] == [10]
    assert _rows(tmp_path, SORTED) == want
    folder = run.root / COMPACTED / "metrics"
    folder.rename(elsewhere / "metrics")
    folder.symlink_to(elsewhere / "metrics")  # the kind's folder leads out of the run: none of it is read
    assert parts(run.root, "metrics") == []
    assert _rows(tmp_path, SORTED) == want
