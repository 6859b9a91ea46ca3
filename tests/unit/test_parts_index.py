"""store/parts_index.py (issue 53): compaction keeps its parts' footers in one file per kind, and `ts sql`
takes an entry only for the very part file it was read from. The parts read through the index are the
parts read from their own footers, and the named queries answer what the files say when the index is
missing, torn, from another version, a link, or older than its parts: the run extended, a block made
again, a compaction killed (kill -9) between its parts and its index."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

from tests.unit import test_sql_folder_index as folder_index
from tests.unit.test_sql_aggregates import _same
from tests.unit.test_sql_folder_index import _answers, _copy, _files_say, _iteration, _settle
from thinking_seeds.store import compacted_parts, compaction, parts_index
from thinking_seeds.store.compaction import COMPACTED, compact, parts
from thinking_seeds.store.parts_index import INDEX, read_index, write_index

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module", autouse=True)
def small_blocks():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compaction, "BLOCK", 2)
        yield


# the compacted run of tests/unit/test_sql_folder_index.py (5 iterations, blocks of 2), built in this module
compacted = folder_index.compacted


def _indexed_copy(compacted, tmp_path):
    """A copy of the compacted run, compacted once more. A copy's parts are new inodes, so the index
    copied with them stands for none of them (read around: the copy reads every footer); compaction
    writes no part there (they are up to date) and indexes the copy's own."""
    run, want = _copy(compacted, tmp_path)
    folder = run.root / COMPACTED / "metrics"
    assert read_index(folder) and not [p for p in parts(run.root, "metrics") if _from_index(folder, p)]
    assert compact(run.root) == []
    assert all(_from_index(folder, p) for p in parts(run.root, "metrics"))
    return run, want


def _from_index(folder, part) -> bool:
    entry = read_index(folder).get(part.path.name)
    return entry is not None and entry[0] == parts_index.identity(os.stat(part.path))


def _fields(p) -> tuple:
    return (p.path, p.first, p.recorded, p.folders, p.holding, p.schema, p.chain, p.lean)


def _footers_read(monkeypatch) -> list[str]:
    """The footers of compacted parts opened from now on (an iteration's own files are read as before)."""
    opened: list[str] = []
    real = pq.read_metadata

    def read_metadata(path, *args, **kwargs):
        if f"{os.sep}{COMPACTED}{os.sep}" in os.fspath(path):
            opened.append(os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(compacted_parts.pq, "read_metadata", read_metadata)
    return opened


def _without_index(run_root, kind: str) -> list[tuple]:
    """The parts of `kind` as their own footers say (a copy of the folder without the index)."""
    folder = run_root / COMPACTED / kind
    index = folder / INDEX
    saved = index.read_bytes()
    index.unlink()
    try:
        return [_fields(p) for p in parts(run_root, kind)]
    finally:
        index.write_bytes(saved)


def test_compaction_indexes_every_kind_and_parts_are_read_from_it(compacted, tmp_path, monkeypatch):
    run, want = _indexed_copy(compacted, tmp_path)
    for kind in compaction.PATTERNS:
        assert sorted(read_index(run.root / COMPACTED / kind)) == [
            "iterations=000000-000001.parquet",
            "iterations=000002-000003.parquet",
        ], kind
        expected = _without_index(run.root, kind)
        opened = _footers_read(monkeypatch)
        assert [_fields(p) for p in parts(run.root, kind)] == expected, kind
        assert opened == [], kind  # every part from the index: no footer opened
        monkeypatch.undo()
    opened = _footers_read(monkeypatch)
    _same(_answers(run.root.parent), want)
    assert opened == []
    # nothing changed: compaction leaves the index as it is
    before = {k: os.stat(run.root / COMPACTED / k / INDEX).st_mtime_ns for k in compaction.PATTERNS}
    assert compact(run.root) == []
    assert {k: os.stat(run.root / COMPACTED / k / INDEX).st_mtime_ns for k in compaction.PATTERNS} == before


def test_an_index_older_than_its_parts_is_read_around(compacted, tmp_path, monkeypatch):
    """The run extended and a block made again (a resumed run redid iteration 2), then the index of
    before put back (a compaction that wrote its parts and died before its index): the new and the
    remade parts' own footers are read, the others from the index, and the answers are the files'."""
    run, _ = _indexed_copy(compacted, tmp_path)
    old = {k: (run.root / COMPACTED / k / INDEX).read_bytes() for k in compaction.PATTERNS}
    _iteration(run, 2, shift=0.25)
    for k in range(5, 7):
        _iteration(run, k)
    _settle(run.root)
    compact(run.root)
    for kind, data in old.items():
        (run.root / COMPACTED / kind / INDEX).write_bytes(data)
    for kind in compaction.PATTERNS:
        expected = _without_index(run.root, kind)
        opened = _footers_read(monkeypatch)
        got = parts(run.root, kind)
        monkeypatch.undo()
        assert [_fields(p) for p in got] == expected, kind
        remade = {"iterations=000002-000003.parquet", "iterations=000004-000005.parquet"}
        assert {os.path.basename(p) for p in opened} <= remade and opened, kind
    _same(_answers(run.root.parent), _files_say(run, tmp_path))


def test_a_compaction_killed_between_its_parts_and_its_index(compacted, tmp_path):
    """A real kill -9 of a compacting process right after its parts are written: the next `ts sql`
    answers what the files say, and the next compaction brings the index up to date."""
    run, _ = _indexed_copy(compacted, tmp_path)
    for k in range(5, 7):
        _iteration(run, k)
    _settle(run.root)
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        from thinking_seeds.store import compaction
        compaction.BLOCK = 2
        compaction.write_index = lambda folder: os.kill(os.getpid(), signal.SIGKILL)
        compaction.compact(Path({os.fspath(run.root)!r}))
        """
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-800:]
    new = "iterations=000004-000005.parquet"
    assert all((run.root / COMPACTED / k / new).is_file() for k in compaction.PATTERNS if k != "ngram_pairs")
    assert all(new not in read_index(run.root / COMPACTED / k) for k in compaction.PATTERNS)
    _same(_answers(run.root.parent), _files_say(run, tmp_path))
    compact(run.root)
    assert all(new in read_index(run.root / COMPACTED / k) for k in compaction.PATTERNS)


@pytest.mark.parametrize("damage", ["torn", "garbage", "other version", "link"])
def test_a_damaged_index_costs_time_not_answers(compacted, tmp_path, monkeypatch, damage):
    run, want = _indexed_copy(compacted, tmp_path)
    for kind in compaction.PATTERNS:
        index = run.root / COMPACTED / kind / INDEX
        if damage == "torn":
            index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
        elif damage == "garbage":
            index.write_bytes(b"not an index")
        elif damage == "other version":
            table = parts_index._SCHEMA.empty_table().replace_schema_metadata({b"thinking_seeds.parts_index": b"0"})
            index.unlink()
            parts_index.atomic_write(index, lambda f, t=table: _ipc(f, t))
        else:  # a link to another run's index of the same parts: never read through
            elsewhere = tmp_path / f"elsewhere-{kind}"
            shutil.copy(index, elsewhere)
            index.unlink()
            index.symlink_to(elsewhere)
        assert read_index(index.parent) == {}, (kind, damage)
    opened = _footers_read(monkeypatch)
    _same(_answers(run.root.parent), want)
    assert opened  # the parts' own footers
    monkeypatch.undo()
    targets = {f: f.read_bytes() for f in tmp_path.glob("elsewhere-*")}
    compact(run.root)  # made again: a link is replaced by a file of the run's own, its target left as it was
    assert all(read_index(run.root / COMPACTED / k) for k in compaction.PATTERNS)
    assert not any((run.root / COMPACTED / k / INDEX).is_symlink() for k in compaction.PATTERNS)
    assert {f: f.read_bytes() for f in targets} == targets


def _ipc(f, table) -> None:
    import pyarrow as pa

    with pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)


def test_write_index_leaves_out_parts_it_cannot_vouch_for(compacted, tmp_path):
    """A part replaced by another file of the same name is a new inode: its old entry is not taken."""
    run, _ = _indexed_copy(compacted, tmp_path)
    folder = run.root / COMPACTED / "metrics"
    part = folder / "iterations=000000-000001.parquet"
    entry = read_index(folder)[part.name]
    copy = folder / ".copy"
    shutil.copy2(part, copy)  # same bytes and mtime, another inode
    os.replace(copy, part)
    assert entry[0] != parts_index.identity(os.stat(part))
    assert write_index(folder)  # that entry read again from the part's own footer
    assert read_index(folder)[part.name][0] == parts_index.identity(os.stat(part))
