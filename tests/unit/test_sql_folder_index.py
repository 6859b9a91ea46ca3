"""compaction.FOLDERS (issue 53): a compacted part vouches for its iteration folders by their mtimes,
so `ts sql` stats a folder instead of every file in it and never lists it; what the named queries
answer stays what the files say when the run is extended, resumed after a kill -9 (files written
and no part updated), or compacted again."""

from __future__ import annotations

import os
import shutil
import time

import pyarrow as pa
import pytest

from tests.helpers.synthetic_run import make_run
from tests.unit.test_sql_aggregates import _prefix_table, _same
from thinking_seeds.store import compaction, sql_files
from thinking_seeds.store.compaction import COMPACTED, compact, parts
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.prefix_aggregates import write_prefix_aggregates
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA, ROLLOUT_SCHEMA, with_derived_prefix_columns
from thinking_seeds.store.sql import NAMED_QUERIES, connect, run_named, views_in


@pytest.fixture(scope="module", autouse=True)
def small_blocks():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compaction, "BLOCK", 2)
        yield


def _rollouts(k: int, shift: float = 0.0) -> pa.Table:
    rows = []
    for j in range(8):
        seeded = j % 2 == 1
        rows.append(
            {
                "run_id": "a",
                "iteration": k,
                "prompt_id": f"q{j // 4}",
                "sample_id": j,
                "kind": "seeded" if seeded else "on_policy",
                "source_step": max(0, k - 1 - j % 3) if seeded else None,
                "prefix_len": (j * 3 + k) % 9 if seeded else 0,
                "prompt_token_ids": [1],
                "token_ids": [2],
                "old_logprobs": [-0.5],
                "behaviour_logprobs": [-0.5],
                "response_text": "x",
                "answer": "1",
                "status": "ok" if (j + k) % 3 == 0 else "wrong",
                "reward": ((j + k) % 3 == 0) + shift,
                "advantage": 0.0,
            }
        )
    return pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA)


def _iteration(run, k: int, shift: float = 0.0) -> None:
    """What iteration k's stages write (prefixes and their aggregates, rollouts, metrics, manifest)."""
    t = _prefix_table("a", k)
    if shift:
        t = t.slice(0, 5)  # a seeds stage redone: other prefixes
    write_table_atomic(with_derived_prefix_columns(t), run.prefixes(k), schema=PREFIX_FILE_SCHEMA)
    write_prefix_aggregates(run.prefixes(k))
    write_table_atomic(_rollouts(k, shift), run.rollouts(k), schema=ROLLOUT_SCHEMA)
    metrics = {f"actor/{m}/{p}": k / 10 + shift for m in ("entropy", "pg_clipfrac") for p in ("all", "prefix")}
    run.write_metrics(k, "update", metrics)
    run.write_metrics(k, "verify", {"reward/mean": k / 20 + shift})
    if k % 2 == 1:
        run.write_metrics(k + 1, "evaluate", {"eval/accuracy": k / 30 + shift, "eval/pass@2": 0.5})
    run.write_manifest(Manifest("evaluate", k, "h"))


def _run(base, iterations: int):
    run = make_run(base, "a")
    for k in range(iterations):
        _iteration(run, k)
    return run


def _settle(root) -> None:
    """Every folder of the run written in the last 30 s as if written a minute ago (compaction records
    only settled folders)."""
    now = time.time_ns()
    for d, _, _ in os.walk(root):
        if os.stat(d).st_mtime_ns > now - 30 * 10**9:
            os.utime(d, ns=(now - 60 * 10**9, now - 60 * 10**9))


def _answers(base) -> dict[str, list[tuple]]:
    # the views the named queries read, as `ts sql --query` builds them (not prefixes or rollouts)
    con = connect("a", base, views=set().union(*(views_in(sql) for _, sql in NAMED_QUERIES.values())))
    try:
        return {name: run_named(con, name).rows for name in NAMED_QUERIES}
    finally:
        con.close()


def _files_say(run, tmp_path) -> dict[str, list[tuple]]:
    """The answers of a copy of the run without its compacted parts."""
    bare = tmp_path / f"bare-{time.monotonic_ns()}"
    shutil.copytree(run.root, bare / "a", ignore=shutil.ignore_patterns(COMPACTED))
    return _answers(bare)


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """A run of 5 iterations (blocks 0-1 and 2-3 finished), its folders settled, compacted; and what
    its files say."""
    base = tmp_path_factory.mktemp("compacted")
    run = _run(base, 5)
    want = _files_say(run, base)
    _settle(run.root)
    assert compact(run.root)
    return run, want


def _copy(compacted, tmp_path):
    """A copy of the compacted run (copytree keeps files' and folders' mtimes: its parts stay fresh)."""
    run, want = compacted
    shutil.copytree(run.root.parent, tmp_path / "runs")
    return RunDir.for_run("a", tmp_path / "runs"), want


def test_a_part_vouches_for_its_folders(compacted, tmp_path, monkeypatch):
    run, want = _copy(compacted, tmp_path)
    for kind in compaction.PATTERNS:
        if kind == "rollouts":
            continue  # small files are copied too, but only their roll-up is read by a named query
        got = parts(run.root, kind)
        assert [p.first for p in got] == [0, 2], kind
        assert all(len(p.folders) == 2 and p.unchanged_folders(run.root) == set(p.folders) for p in got), kind
    every = [p for kind in compaction.PATTERNS for p in parts(run.root, kind)]
    # every source in a folder the part vouches for: no file of it is looked at, its record not even decoded
    assert all(p.vouched(p.unchanged_folders(run.root)) and not p.sources_outside(set(p.folders)) for p in every)
    vouched = {os.fspath(run.root / f) for p in every for f in p.folders}
    opened: list[str] = []
    real_stat, real_scandir = os.stat, os.scandir

    def stat(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_stat(path, *args, **kwargs)

    def scandir(path=".", *args, **kwargs):
        opened.append(os.fspath(path) + os.sep)
        return real_scandir(path, *args, **kwargs)

    monkeypatch.setattr(sql_files.os, "stat", stat)
    monkeypatch.setattr(sql_files.os, "scandir", scandir)
    got = _answers(run.root.parent)
    monkeypatch.undo()
    _same(got, want)
    # a vouched folder is stat'ed, never listed, and no file in it is stat'ed
    listed = [p for p in opened if p.endswith(os.sep) and p.rstrip(os.sep) in vouched]
    inside = listed + [p for p in opened if os.path.dirname(p) in vouched]
    assert inside == [], inside[:5]
    assert {p for p in opened if p in vouched} == vouched


def test_files_written_after_compaction_are_read(compacted, tmp_path):
    """A run killed (kill -9) and resumed redoes iteration 2's stages and a later `ts eval` adds a file
    to iteration 3's folder, after its block was compacted: no part is updated, the files are read."""
    run, before = _copy(compacted, tmp_path)
    _iteration(run, 2, shift=0.25)
    run.write_metrics(3, "evaluate-validation", {"eval/accuracy": 0.9})
    got = _answers(run.root.parent)
    assert got != before
    _same(got, _files_say(run, tmp_path))
    assert {p.name for p in compact(run.root)} == {"iterations=000002-000003.parquet"}
    _same(_answers(run.root.parent), got)  # compacted again: the new files in the parts, the same answers


def test_an_extended_run_reads_its_new_iterations(compacted, tmp_path):
    run, _ = _copy(compacted, tmp_path)
    for k in range(5, 9):  # `ts train` extended the run: iterations 5-8, blocks 4-5 and 6-7 finished
        _iteration(run, k)
    got = _answers(run.root.parent)
    _same(got, _files_say(run, tmp_path))
    _settle(run.root)
    written = compact(run.root)
    assert {p.name for p in written} == {"iterations=000004-000005.parquet", "iterations=000006-000007.parquet"}
    _same(_answers(run.root.parent), got)


def test_a_part_whose_folders_had_not_settled_checks_each_file(tmp_path, monkeypatch):
    """Folders written within FOLDER_SETTLED_S of a compaction are not recorded: such a part vouches for
    none of its files, checks each one, and a file redone since makes it stale (the files answer)."""
    run = RunDir(make_run(tmp_path / "runs", "a").root)
    for k in range(5):
        _iteration(run, k)
    monkeypatch.setattr(compaction, "FOLDER_SETTLED_S", 1e9)  # nothing has settled
    compact(run.root)
    got = parts(run.root, "prefix_groups")
    assert got and all(p.folders == {} and p.holding == 2 for p in got)
    assert all(not p.vouched(p.unchanged_folders(run.root)) for p in got)
    assert got[0].sources_outside(set()) == sorted(got[0].sources)
    _iteration(run, 1, shift=0.25)  # redone after the compaction
    assert not got[0].fresh(run.root) and got[1].fresh(run.root)
    _same(_answers(run.root.parent), _files_say(run, tmp_path))
