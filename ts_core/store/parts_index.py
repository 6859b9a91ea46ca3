"""The footers of a kind's compacted parts, kept in one file beside them: what `ts sql` reads of each part
(its record of sources and folders, its Arrow schema) without opening every part.

Why: a `ts sql` start reads the footer of every part of each kind its views use. A long run of small
iterations has many (156 per kind at 1M prefixes of 64 per iteration, the `runs` query reads three
kinds), and on the project's box each footer costs ~0.17 ms to open and decode: ~0.08 s of a query
whose goal is 1.0 s end to end. Compaction, which writes the parts, writes this index after them
(`write_index`); a reader takes an entry only for the part file it was read from (same size, mtime
and inode: a part is published by atomic rename, so a part made again is a new inode) and reads any
other part's own footer. An index that is missing, torn, from another version, or older than its
parts (a kill -9 between a part and the index, a run extended by an older version) costs time,
never a wrong answer. Only parts whose footer holds no Arrow schema copy (`Part.lean`) are indexed:
the others are made again by the next compaction.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.contained import read_small

__all__ = ["INDEX", "Footer", "identity", "read_index", "write_index"]

INDEX = "_footers.arrow"  # in compacted/<kind>/; no part's name (`iterations=*.parquet`) matches it
_VERSION_KEY = b"thinking_seeds.parts_index"
_VERSION = b"1"
_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string()),  # the part's file name
        pa.field("size", pa.int64()),
        pa.field("mtime_ns", pa.int64()),
        pa.field("ino", pa.int64()),
        pa.field("schema", pa.binary()),  # its Arrow schema without metadata (pa.Schema.serialize)
        pa.field("keys", pa.list_(pa.binary())),  # its footer's key-value metadata, in the footer's order
        pa.field("values", pa.list_(pa.large_binary())),
    ],
    metadata={_VERSION_KEY: _VERSION},
)

# (identity: size, mtime_ns, inode), the footer's key-value metadata, the part's Arrow schema (no metadata)
Footer = tuple[tuple[int, int, int], dict[bytes, bytes], pa.Schema]


def identity(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino


def read_index(folder: Path) -> dict[str, Footer]:
    """{part file name: its footer as indexed}; empty when there is no readable index of this version
    (or it is a link: nothing is read through one)."""
    try:  # not through a link, a FIFO, or a file larger than read_small's limit (ValueError: DataError)
        table = pa.ipc.open_file(pa.py_buffer(read_small(folder / INDEX))).read_all()
    except (OSError, ValueError, pa.ArrowException):
        return {}
    version = (table.schema.metadata or {}).get(_VERSION_KEY)
    if version != _VERSION or table.schema.remove_metadata() != _SCHEMA.remove_metadata():
        return {}  # another version's index: its parts' own footers are read
    out = {}
    c = table.to_pydict()
    for name, size, mtime, ino, schema, keys, values in zip(
        c["name"], c["size"], c["mtime_ns"], c["ino"], c["schema"], c["keys"], c["values"], strict=True
    ):
        try:
            out[name] = ((size, mtime, ino), dict(zip(keys, values, strict=True)), _schema(schema))
        except (pa.ArrowException, ValueError, TypeError):
            continue  # a damaged entry: that part's own footer is read
    return out


@functools.lru_cache(maxsize=64)
def _schema(serialized: bytes) -> pa.Schema:
    """A kind's parts share their schema: decoded once."""
    return pa.ipc.read_schema(pa.py_buffer(serialized))


def write_index(folder: Path) -> bool:
    """Index the footers of the parts in `folder` (compacted/<kind>); entries of the index there that
    still stand for their part are kept, the other parts' footers read. Returns whether it wrote (not
    when the index already stands for every part, nor when there is no part)."""
    old = read_index(folder)
    rows: list[tuple] = []
    changed = False
    try:
        with os.scandir(folder) as it:
            entries = sorted(
                (e for e in it if e.name.startswith("iterations=") and e.name.endswith(".parquet")),
                key=lambda e: e.name,
            )
            for e in entries:
                if not e.is_file(follow_symlinks=False):
                    continue
                before = identity(e.stat(follow_symlinks=False))
                kept = old.get(e.name)
                if kept is not None and kept[0] == before:
                    rows.append((e.name, before, kept[1], kept[2]))
                    continue
                changed = True
                footer = pq.read_metadata(e.path)
                meta = dict(footer.metadata or {})
                if b"ARROW:schema" in meta or identity(os.stat(e.path, follow_symlinks=False)) != before:
                    continue  # not lean (made again by the next compaction), or replaced while read
                rows.append((e.name, before, meta, footer.schema.to_arrow_schema().remove_metadata()))
    except OSError:
        return False
    if not rows or (not changed and len(rows) == len(old)):
        return False
    columns = {
        "name": [r[0] for r in rows],
        "size": [r[1][0] for r in rows],
        "mtime_ns": [r[1][1] for r in rows],
        "ino": [r[1][2] for r in rows],
        "schema": [r[3].serialize().to_pybytes() for r in rows],
        "keys": [list(r[2]) for r in rows],
        "values": [list(r[2].values()) for r in rows],
    }
    table = pa.table(columns, schema=_SCHEMA)

    def write(f) -> None:
        with pa.ipc.new_file(f, _SCHEMA) as w:
            w.write_table(table)

    atomic_write(folder / INDEX, write)
    return True
