"""The Parquet files behind `ts sql`'s views: which files a view reads in a run directory (fresh
compacted parts first, store/compaction.py, then the files no part stands for), their footers
checked against the contract, and one pyarrow dataset over the readable ones.

A file that cannot be read (truncated, a column of the wrong type) is left out, with one line
naming it and saying how to repair it, for the caller to report: one damaged run never takes a
query over all runs down.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.store.compacted_parts import COMPACTED, Part
from thinking_seeds.store.compacted_parts import parts as compacted_parts
from thinking_seeds.store.compaction import PATTERNS as COMPACTED_VIEWS
from thinking_seeds.store.contained import link_out
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.schemas import PREFIX_SCHEMA, ROLLOUT_SCHEMA

__all__ = [
    "METRICS_SCHEMA",
    "PARQUET_VIEWS",
    "dataset",
    "file_order",
    "footers",
    "fresh_parts",
    "fresh_parts_of",
    "checked_parts",
    "iteration_of",
    "listed",
    "literal",
    "literals",
    "quoted",
    "readable_files",
    "view_files",
]

METRICS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("iteration", pa.int64()),
        pa.field("stage", pa.string()),
        pa.field("name", pa.string()),
        pa.field("value", pa.float64()),
    ]
)

# What a run directory holds for each Parquet view: glob under the run dir, contract schema.
PARQUET_VIEWS: dict[str, tuple[str, pa.Schema]] = {
    "prefixes": ("corpus/prefixes/iteration=*/prefixes.parquet", PREFIX_SCHEMA),
    "rollouts": ("rollouts/iteration=*/rollouts.parquet", ROLLOUT_SCHEMA),
    "metrics": ("metrics/iteration=*/*.parquet", METRICS_SCHEMA),
}


def listed(run: Path, pattern: str, skip: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The run's files of `pattern`, as path strings (in no particular order), leaving out the iteration
    folders in `skip` (path strings: folders a fresh compacted part vouches for, `fresh_parts`). A view's
    pattern, `<folder>/iteration=*/<name>`, is listed with os.scandir: a live run of small iterations has
    15,630 iteration folders per view at 1M prefixes, and pathlib's glob of them took 2-3x as long
    (0.49 s against 0.16 s for the metrics' 47k files). Strings, not Paths: making 94k Path objects
    cost ~0.5 s of a 1M run's `runs` query. Any other pattern: pathlib's glob."""
    folder, sep, name = pattern.partition("/iteration=*/")
    if not sep or "/" in name:
        return [os.fspath(f) for f in run.glob(pattern) if not f.is_symlink() and link_out(run, f) is None]
    if link_out(run, folder) is not None:  # a view's folder linked out of the run: nothing of it is read
        return []
    try:  # links are not followed out of the run: an iteration folder or a file that is one is left out
        with os.scandir(run / folder) as it:
            folders = [
                e.path
                for e in it
                if e.name.startswith("iteration=") and e.path not in skip and e.is_dir(follow_symlinks=False)
            ]
    except OSError:  # no such folder (a run before its first stage): nothing to read
        return []
    if not any(c in name for c in "*?["):  # one file per folder: a stat, not a listing
        return [p for p in (os.path.join(d, name) for d in folders) if _regular(p)]
    out = []
    for d in folders:
        try:
            with os.scandir(d) as it:
                out += [e.path for e in it if fnmatchcase(e.name, name) and e.is_file(follow_symlinks=False)]
        except OSError:  # removed while listed (retention): as if it had not been there
            continue
    return out


def _parts(path: Path | str) -> tuple[str, ...]:
    return tuple(path.split(os.sep)) if isinstance(path, str) else path.parts


def _regular(path: str) -> bool:
    """Whether `path` is a regular file itself (one lstat: a link is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def iteration_of(path: Path | str) -> int:
    """K of the `iteration=K` folder a file (a Path or a path string) is in; -1 outside one."""
    for part in reversed(_parts(path)):
        if part.startswith("iteration="):
            try:
                return int(part.split("=", 1)[1])
            except ValueError:
                break
    return -1


def _compatible(found: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a file's column type reads as the contract's: equal, or a lossless numeric widening,
    or lists of compatible values. Anything else (a string where a number belongs) would fail at
    query time, so the file is reported instead."""
    if found == expected:
        return True
    if pa.types.is_integer(found) and (pa.types.is_integer(expected) or pa.types.is_floating(expected)):
        return True
    if pa.types.is_floating(found) and pa.types.is_floating(expected):
        return True
    if pa.types.is_string(found) or pa.types.is_large_string(found):
        return pa.types.is_string(expected) or pa.types.is_large_string(expected)
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(f(found) for f in lists) and any(f(expected) for f in lists):
        return _compatible(found.value_type, expected.value_type)
    return False


def _readable(f: Path, contract: pa.Schema) -> tuple[pa.Schema, int]:
    """The file's schema and row count (from its footer), or DataError (one line: which file, what
    is wrong, how to fix)."""
    try:
        meta = pq.read_metadata(f)
        file_schema = meta.schema.to_arrow_schema()
    except (OSError, pa.ArrowInvalid) as e:
        raise DataError(f"cannot read Parquet file {f} ({' '.join(str(e).split())}): {_fix(f)}") from None
    for fld in file_schema:
        if fld.name in contract.names and not _compatible(fld.type, contract.field(fld.name).type):
            raise DataError(
                f"Parquet file {f}: column {fld.name!r} is {fld.type}, expected {contract.field(fld.name).type}: "
                f"{_fix(f)}"
            )
    return file_schema, meta.num_rows


def _fix(f: Path) -> str:
    """How to repair a damaged file: looked up only for one (a stat per parent folder)."""
    run = next((p for p in f.parents if (p / "config.yaml").is_file()), None)
    return f"run `ts check {run.name}` and re-run the stage it names" if run else "rewrite or remove it"


def readable_files(files: list[Path], contract: pa.Schema, damaged: list[str]) -> list[tuple[Path, pa.Schema]]:
    """(file, its schema) of each readable file; each one that is not is reported in `damaged`."""
    return [(f, schema) for f, schema, _ in footers(files, contract, damaged)]


def footers(files: list[Path], contract: pa.Schema, damaged: list[str]) -> list[tuple[Path, pa.Schema, int]]:
    """(file, its schema, its rows) of each readable file; each one that is not is reported in `damaged`."""
    out = []
    for f in files:
        try:
            out.append((f, *_readable(f, contract)))
        except DataError as e:
            damaged.append(str(e))
    return out


def dataset(files: list[tuple[Path, pa.Schema]], contract: pa.Schema) -> Any:
    """One Arrow dataset over readable `files` with the contract's columns first, plus any extra
    column a file has (union by name); a file missing a column reads it as null. (pyarrow.dataset is
    imported here, not at the top: its 50 ms are most of what a query that needs none would wait for.)"""
    import pyarrow.dataset as pads

    schema = contract
    for _, file_schema in files:
        extra = [fld for fld in file_schema if fld.name not in schema.names]
        if extra:
            schema = pa.schema(list(schema) + extra)
    return pads.dataset([str(f) for f, _ in files], schema=schema, format="parquet")


def quoted(name: str) -> str:
    """An SQL identifier: `name` in double quotes."""
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    """An SQL string literal: `text` in single quotes."""
    return "'" + text.replace("'", "''") + "'"


def literals(texts: Iterable[str]) -> str:
    """SQL string literals, comma-separated (an IN list or, in brackets, a DuckDB list)."""
    return ", ".join(literal(t) for t in texts)


def fresh_parts(run: Path, kind: str, pattern: str) -> tuple[list[Part], list[Path]]:
    """(the run's compacted parts of `kind` that are still fresh, every file of `pattern` none of them
    stands for): store/compaction.py's parts replace their files only while those are unchanged.
    The iteration folders a fresh part vouches for by their mtime are not listed (compaction.FOLDERS:
    one stat per folder, not a listing and a stat per file)."""
    parts_, skip, covered = fresh_parts_of(run, (kind,))
    return parts_, [Path(f) for f in listed(run, pattern, skip) if f not in covered]


def fresh_parts_of(run: Path, kinds: tuple[str, ...]) -> tuple[list[Part], set[str], set[str]]:
    """(fresh parts of `kinds`, the folders they vouch for and the files they stand for, as path
    strings), for `listed(..., skip=)`. Kinds in order of preference: a block a fresh part of an
    earlier kind stands for is not checked again for a later one."""
    root = os.fspath(run) + os.sep
    fresh, skip, covered, blocks = [], set(), set(), set()
    for kind in kinds:
        for p in compacted_parts(run, kind, skip=blocks):  # a block an earlier kind stands for: not even read
            same = p.unchanged_folders(run)
            if same is None:
                continue
            fresh.append(p)
            skip |= {root + f for f in same}
            # strings: cheaper than Paths (and os.path.join); none where its folders vouch for every file
            covered |= {root + rel for rel in p.sources_outside(same)}
        blocks |= {p.first for p in fresh}
    return fresh, skip, covered


def checked_parts(parts_: list[Part], contract: pa.Schema, damaged: list[str]) -> list[tuple[Path, pa.Schema]]:
    """(path, schema) of each part whose columns read as the contract's (`readable_files` for parts,
    from the footer `compaction.parts` read already); each one that does not is reported in `damaged`."""
    out = []
    for p in parts_:
        bad = [f for f in p.schema if f.name in contract.names and not _compatible(f.type, contract.field(f.name).type)]
        if bad:
            damaged.append(f"compacted part {p.path}: column {bad[0].name!r} is {bad[0].type}: run `ts compact` again")
        else:
            out.append((p.path, p.schema))
    return out


def view_files(run: Path, view: str, pattern: str) -> tuple[list[Part], list[Path]]:
    """The files a view reads in one run: fresh compacted parts and the files they do not stand for."""
    if view not in COMPACTED_VIEWS:
        return [], [Path(f) for f in listed(run, pattern)]
    return fresh_parts(run, view, pattern)


def file_order(f: Path | str) -> tuple:
    """Run, then iteration (a compacted part at its first iteration), then name; of Paths, or of path
    strings (one kind per sort)."""
    parts = _parts(f)
    if len(parts) >= 3 and parts[-3] == COMPACTED:
        return (parts[:-3], _part_first(parts[-1]), "")
    return (parts[:-3], iteration_of(f), parts[-1])


def _part_first(name: str) -> int:
    try:
        return int(name.split("=", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return -1
