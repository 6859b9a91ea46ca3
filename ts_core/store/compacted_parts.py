"""What a compacted part (store/compaction.py) records about the files it stands for, and how `ts sql`
reads that back: `Part`, `parts(run_dir, kind)`, and the freshness check by folder (FOLDERS, below).

Split from compaction.py, which writes parts, because this half is what every `ts sql` start pays
for: at 1M prefixes of 64 per iteration a query reads ~500 part footers and checks ~15,600 iteration
folders per kind, and the several kinds of part made from the same prefix files record the same
files. So within one `checking()` block (sql.connect holds one while it builds the views) each
folder is stat'ed once, and each distinct record of sources is decoded once, whichever kinds ask.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.store.contained import link_out
from thinking_seeds.store.ngram_pairs import CHAIN_KEY
from thinking_seeds.store.parts_index import identity, read_index

__all__ = ["CHAIN_KEY", "COMPACTED", "FOLDER_SETTLED_S", "Part", "checking", "parts"]

COMPACTED = "compacted"  # the folder under the run directory
_SOURCES_KEY = b"thinking_seeds.compacted_from"
_FOLDERS_KEY = b"thinking_seeds.compacted_folders"  # {folder relative to the run: mtime_ns} (FOLDERS)
_HOLDING_KEY = b"thinking_seeds.compacted_holding"  # how many folders the sources are in (Part.vouched)
# FOLDERS. A part also records the mtime of each folder its sources are in, taken before they are
# listed; while a folder's mtime is unchanged it holds the same files (the stages write by atomic
# rename, store/atomic.py, which changes the folder's mtime when a file is added, replaced or
# removed), so `ts sql` checks a block of iterations with one stat per folder instead of one per
# file, and never lists those folders (issue 53: 78k files at 1M prefixes of 64 per iteration).
# What that no longer notices: a file rewritten in place (opened and written, not renamed) in a folder
# whose mtime is recorded. Nothing in the project writes so; a hand edit should write a new file
# and rename it. Only folders untouched for FOLDER_SETTLED_S are recorded (a folder written within the
# file system's timestamp granularity could change again without its mtime moving); the others'
# sources are checked file by file, as are those of a folder whose mtime moved (a `ts eval` added a file).
FOLDER_SETTLED_S = 2.0

# {folder path: its mtime_ns, or None where it is gone}: folders stat'ed in the current `checking()`
_STATS: contextvars.ContextVar[dict[str, int | None] | None] = contextvars.ContextVar("_STATS", default=None)


@contextlib.contextmanager
def checking() -> Iterator[None]:
    """Within it, each folder's mtime is read once (a `ts sql` start: every kind of part made from the
    prefix files checks the same ~15,600 folders of a 1M-prefix run). Only for a moment's work: a
    folder that changes inside the block is seen as it was at its first check."""
    token = _STATS.set({} if _STATS.get() is None else _STATS.get())
    try:
        yield
    finally:
        _STATS.reset(token)


_UNSEEN = object()  # a folder not stat'ed yet in this checking() block


@functools.lru_cache(maxsize=1024)
def _decoded(recorded: bytes) -> dict[str, tuple[int, int]]:
    """{source: (size, mtime_ns)} of a part's record of its files, decoded once per distinct record (the
    kinds made from one block's prefix files record the same files). Shared between Parts: read-only.
    (The rows each source holds are read by corpus_files, store/sql_tables.py, from the same record.)"""
    return {k: (int(v[0]), int(v[1])) for k, v in json.loads(recorded).items()}


@functools.lru_cache(maxsize=1024)
def _folders(recorded: bytes) -> dict[str, int]:
    return {k: int(v) for k, v in json.loads(recorded).items()}


@dataclass(frozen=True)
class Part:
    """One compacted file and the originals it replaces while they are unchanged.

    What it records of its files (`sources`: path -> (size, mtime_ns)) is decoded only when
    asked: a part whose sources all sit in folders it vouches for (FOLDERS) is checked by those
    folders alone (`holding`), and at 1M prefixes of 64 per iteration its metrics parts record 94k files."""

    path: Path
    first: int  # first iteration of the block
    recorded: bytes = field(repr=False)  # its sources' JSON: {path relative to the run: [size, mtime_ns, rows]}
    folders: dict[str, int] = field(default_factory=dict)  # folder relative to the run -> mtime_ns (FOLDERS)
    holding: int = -1  # how many folders its sources are in (-1: not recorded, parts written before it)
    schema: pa.Schema | None = field(default=None, compare=False)  # its columns (no metadata: that is `recorded`)
    chain: str | None = None  # ngram_pairs only: its chain value (store/ngram_pairs.py)
    lean: bool = True  # its footer holds no second copy of the record (parquet_io.write_table_atomic's key_value)

    @property
    def sources(self) -> dict[str, tuple[int, int]]:
        return _decoded(self.recorded)

    def fresh(self, run_dir: Path) -> bool:
        """Whether every file the part copies is still exactly what it copied."""
        return self.unchanged_folders(run_dir) is not None

    def unchanged_folders(self, run_dir: Path) -> set[str] | None:
        """None when the part is stale; else the folders (relative to the run) whose mtime is the one
        recorded, so that hold exactly the files they held when the part was made (FOLDERS): a caller
        need not list them. A source in any other folder is checked by its own size and mtime."""
        # strings, not Paths, and no os.path.join: a long run's parts stand for ~100k files
        root = os.fspath(run_dir) + os.sep
        same = set()
        stats = _STATS.get()
        if stats is None:
            stats = {}  # outside checking(): seen once, by this call
        for folder, mtime in self.folders.items():
            # a stat per folder, inline: 47k folders at 1M prefixes (`runs`), where a call each cost 0.03 s
            path = root + folder
            now = stats.get(path, _UNSEEN)
            if now is _UNSEEN:
                try:
                    now = os.stat(path).st_mtime_ns
                except OSError:
                    now = None
                stats[path] = now
            if now is None:
                return None  # gone: so are its files
            if now == mtime:
                same.add(folder)
        if self.vouched(same):
            return same  # every source in a folder that holds what it held: no file to check
        for rel, (size, mtime) in self.sources.items():
            if same and rel.rpartition(os.sep)[0] in same:
                continue
            try:
                st = os.stat(root + rel)
            except OSError:
                return None
            if (st.st_size, st.st_mtime_ns) != (size, mtime):
                return None
        return same

    def vouched(self, same: set[str]) -> bool:
        """Whether the unchanged folders `same` (of unchanged_folders) hold every source of the part:
        the sources' folders are all recorded (as many as `holding`) and all unchanged."""
        return self.holding >= 0 and len(same) == len(self.folders) == self.holding

    def sources_outside(self, same: set[str]) -> list[str]:
        """The sources (relative to the run) in no folder of `same`: what a reader must still look at."""
        if self.vouched(same):
            return []
        return [rel for rel in self.sources if rel.rpartition(os.sep)[0] not in same]


def parts(run_dir: Path, view: str, skip: Collection[int] = ()) -> list[Part]:
    """The readable parts of `view` under `run_dir` (fresh or not), in iteration order, but those whose
    block starts at an iteration in `skip` (known from the name: their footers are not read). An
    unreadable part (torn by a crash of something else, or written by a newer version) is skipped:
    parts are a cache, the originals are the data."""
    out = []
    folder = run_dir / COMPACTED / view
    if link_out(run_dir, folder) is not None:  # never read through a link out of the run
        return []
    try:  # a part that is a link is not read either; in a folder of the run, a file that is none stays in it
        with os.scandir(folder) as it:
            found = sorted(
                (e.name, e)
                for e in it
                if e.name.startswith("iterations=") and e.name.endswith(".parquet") and e.is_file(follow_symlinks=False)
            )
    except OSError:  # no such folder: nothing compacted yet
        return []
    index = read_index(folder) if found else {}  # footers read by compaction (store/parts_index.py)
    for name, entry in found:
        path = folder / name
        try:
            first = int(name.split("=", 1)[1].split("-", 1)[0])
            if first in skip:
                continue
            indexed = index.get(name)
            if indexed is not None and indexed[0] == identity(entry.stat(follow_symlinks=False)):
                _, meta, schema = indexed  # the very file whose footer was indexed
            else:
                footer = pq.read_metadata(path)
                meta, schema = footer.metadata or {}, footer.schema.to_arrow_schema().remove_metadata()
            recorded = meta[_SOURCES_KEY]
            folders = _folders(meta.get(_FOLDERS_KEY, b"{}"))
            holding = int(meta.get(_HOLDING_KEY, b"-1"))
            chain = meta[CHAIN_KEY].decode() if CHAIN_KEY in meta else None
        except (OSError, KeyError, ValueError, TypeError, IndexError, AttributeError, pa.ArrowInvalid):
            continue
        out.append(Part(path, first, recorded, folders, holding, schema, chain, b"ARROW:schema" not in meta))
    return out
