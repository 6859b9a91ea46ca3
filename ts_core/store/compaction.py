"""Compaction of a run's many small Parquet files into a few large parts, for `ts sql`.

Kinds of part (PATTERNS), each made from the files of a finished block of BLOCK iterations:

- metrics: every iteration writes one small metrics file per stage (`metrics/iteration=K/<stage>.parquet`),
  so a run of 2,442 iterations has ~10,000 of them, and opening each one (its footer when the view
  is built, again when a query scans it) is most of what a query over metrics costs there. The
  part is a copy of them, in one table.
- ngram_counts: the diversity queries count distinct 3-grams over every prefix of the corpus
  (164M 3-gram codes on 10M prefixes: 8-13 s of CPU per breakdown on 2 cores, BENCHMARKS.md). The
  part holds each distinct (iteration, source age, length bucket, 3-gram) of the block's prefix
  files once, with its count (schemas.NGRAM_COUNTS_SCHEMA): 4.7x fewer rows, and every breakdown
  the queries make (by age, by length, by iteration, all) is still exact.
- prefix_groups: the prefix corpus's counts per (iteration, source age, length bucket) (the seeds
  stage's aggregates' summary rows, prefix_aggregates.PREFIX_GROUPS_SCHEMA): what the diversity
  queries count prefixes and lengths with. A run of small iterations (64 prefixes each: the tiny
  and game24 presets) has ~15,600 prefix files per million prefixes; read through its parts a block
  of 100 of them costs one footer, not 100 aggregates files' footers.

- rollouts: a copy of the block's rollout files, for a run whose files are small (a block of them
  under SMALL_FILES bytes on average: 128 rows of the tiny preset are ~35 KB). There, opening each
  file is most of what `seeded_solve_rate` costs; a run of large files keeps one file per iteration
  (its per-file cost is a few percent of a query, and a copy would double it on disk).

- the roll-ups the named queries read (store/rollups.py): ngram_keys (a block's 3-grams per source
  age and length bucket, without the iteration), ngram_per_iteration (each iteration's distinct
  3-gram count) and rollout_groups (the rollouts counted per iteration and key), so that a query's
  cost follows a run's iterations, not its rows (issue 53); and ngram_pairs (store/ngram_pairs.py:
  the 3-gram pairs no earlier block had, made against the blocks before it: `_compact_pairs`).

`compact(run_dir)` writes them as `runs/<id>/compacted/<kind>/iterations=000000-000099.parquet`,
and a run writes each block's parts itself, as it goes: `compact_behind` (called when iteration k
starts, from pipeline/loop.py) compacts the block that has just finished in a background thread
(one core's worth of DuckDB, one thread, seconds per block), so a live run is never more than one
block of small files away from its compacted form, and `ts sql` on it answers as on a compacted one.

The originals are never changed, moved or deleted: the stages, resume (manifests hash them), `ts
check`, retention and the archive keep working on them, and a stage running now can never see a
file of its own touched. A part records in its Parquet metadata the files it is made from (path relative
to the run, size, mtime_ns) and the mtimes of their folders (FOLDERS, below); `ts sql`
(store/sql_views.py) reads a part instead of its files only while every one of them is unchanged,
and reads any file no valid part lists (a later `ts eval`, a stage that was redone) as it is. So a
stale part costs time, never correctness.

A block is finished when the iteration after it has started (a manifest under
`manifests/iteration=<last+1>/`): the stages run in order, so nothing writes into its folders any
more but a later `ts eval --step`, which adds its own file (read beside the part until the next
compaction rewrites the part). Each part is written atomically; an interrupted compaction leaves
whole parts only, and running it again writes what is missing or stale: it is resumable.

Costs: metrics parts ~1/10 of the originals' bytes (Parquet being mostly per-file overhead at this
size); ngram_counts parts ~1/8 of the prefix files' bytes; rollouts parts (small files only) about
the files' bytes. The prefix files themselves are not copied: the queries read their aggregates.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.store.compacted_parts import (
    _FOLDERS_KEY,
    _HOLDING_KEY,
    _SOURCES_KEY,
    CHAIN_KEY,
    COMPACTED,
    FOLDER_SETTLED_S,
    Part,
    parts,
)
from thinking_seeds.store.ngram_pairs import NGRAM_PAIRS_SCHEMA, chain_after, new_pairs_sql
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.parts_index import write_index
from thinking_seeds.store.prefix_aggregates import PREFIX_GROUPS_SCHEMA, prefix_groups_sql, prefix_rows, run_sql
from thinking_seeds.store.rollups import (
    NGRAM_KEYS_SCHEMA,
    NGRAM_PER_ITERATION_SCHEMA,
    ROLLOUT_GROUPS_SCHEMA,
    from_prefixes,
    ngram_keys_sql,
    ngram_per_iteration_sql,
    rollout_groups_sql,
)
from thinking_seeds.store.schemas import NGRAM_COUNTS_SCHEMA, ngram_counts_sql

__all__ = [
    "BLOCK",
    "COMPACTED",
    "PATTERNS",
    "Part",
    "compact",
    "compact_behind",
    "finished_blocks",
    "last_started",
    "parts",
    "wait_for_compaction",
]

BLOCK = 100  # iterations per part
# What is compacted (module docstring): {kind: the files of one iteration a part is made from}.
PATTERNS = {
    "metrics": "metrics/iteration={k}/*.parquet",
    "ngram_counts": "corpus/prefixes/iteration={k}/prefixes.parquet",
    "prefix_groups": "corpus/prefixes/iteration={k}/prefixes.parquet",
    "rollouts": "rollouts/iteration={k}/rollouts.parquet",
    # the roll-ups the named queries read (store/rollups.py)
    "ngram_keys": "corpus/prefixes/iteration={k}/prefixes.parquet",
    "ngram_per_iteration": "corpus/prefixes/iteration={k}/prefixes.parquet",
    "rollout_groups": "rollouts/iteration={k}/rollouts.parquet",
    "ngram_pairs": "corpus/prefixes/iteration={k}/prefixes.parquet",  # made after ngram_keys: _compact_pairs
}
SMALL_FILES = 1 << 20  # rollouts: a block is copied when its files average under this many bytes


def _fingerprint(run_dir: Path, files: list[Path]) -> dict[str, tuple[int, int]]:
    out = {}
    for f in files:
        st = f.stat()
        out[str(f.relative_to(run_dir))] = (st.st_size, st.st_mtime_ns)
    return out


def _part_path(run_dir: Path, view: str, first: int) -> Path:
    return run_dir / COMPACTED / view / f"iterations={first:06d}-{first + BLOCK - 1:06d}.parquet"


def last_started(run_dir: Path) -> int:
    """The newest iteration with a stage manifest (-1 when none has started)."""
    done = -1
    for d in (Path(run_dir) / "manifests").glob("iteration=*"):
        try:
            k = int(d.name.split("=", 1)[1])
        except ValueError:
            continue
        if k > done and any(d.glob("*.json")):
            done = k
    return done


def finished_blocks(run_dir: Path, started: int = -1) -> list[int]:
    """First iterations of the run's finished blocks of BLOCK iterations (the next iteration has
    started: it has a manifest, or it is `started`, the iteration the loop is starting now and that
    has none yet): what `compact` works on."""
    done = max(last_started(Path(run_dir)), started)
    # iteration `done` has started, so every iteration before it is over
    return [first for first in range(0, done - BLOCK + 1, BLOCK)]


def _copied(files: list[Path]) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")


_ROLLOUT_COLUMNS = ("run_id", "iteration", "kind", "source_step", "prefix_len", "status", "reward")


def _rollout_rows(files: list[Path]) -> pa.Table:
    columns = list(_ROLLOUT_COLUMNS)
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in files], promote_options="permissive")


# How each kind's part is made from a block's files: copied, or (schema, SQL over a relation `src`)
# of the rows `_ROWS[folder]` reads from them (read once per block for every kind made from them, and
# every kind's SQL run in one DuckDB connection).
_COPIED = ("metrics", "rollouts")
_SQL: dict[str, tuple[pa.Schema, Callable[[str], str]]] = {
    "ngram_counts": (NGRAM_COUNTS_SCHEMA, lambda src: ngram_counts_sql(src, dedupe=True)),
    "prefix_groups": (PREFIX_GROUPS_SCHEMA, prefix_groups_sql),
    "ngram_keys": (NGRAM_KEYS_SCHEMA, from_prefixes(ngram_keys_sql)),
    "ngram_per_iteration": (NGRAM_PER_ITERATION_SCHEMA, from_prefixes(ngram_per_iteration_sql)),
    "rollout_groups": (ROLLOUT_GROUPS_SCHEMA, rollout_groups_sql),
}
_ROWS = {"corpus/prefixes": prefix_rows, "rollouts": _rollout_rows}


def compact(
    run_dir: Path, views: tuple[str, ...] = tuple(PATTERNS), blocks: list[int] | None = None, started: int = -1
) -> list[Path]:
    """Write the missing or stale parts of `views` for the finished blocks of the run at `run_dir`
    (only those of `blocks`, first iterations, when given; `started`: an iteration that has started
    though it has no manifest yet, `finished_blocks`); returns the parts written (none when everything
    is up to date)."""
    run_dir = Path(run_dir)
    written = []
    finished = finished_blocks(run_dir, started)
    have = {view: {p.first: p for p in parts(run_dir, view)} for view in views}
    for first in finished if blocks is None else [b for b in finished if b in blocks]:
        made = [view for view in views if view != "ngram_pairs"]  # after the others: _compact_pairs
        due = [d for d in (_due(run_dir, view, first, have[view].get(first)) for view in made) if d is not None]
        tables: dict[str, pa.Table] = {}
        for view, files, _, _ in due:
            try:
                if view in _COPIED:
                    tables[view] = _copied(files)
            except (OSError, pa.ArrowException, KeyError):
                pass  # a damaged file: `ts check` reports it, `ts sql` leaves it out; no part for now
        for top in {_top(view) for view, *_ in due if view in _SQL}:
            made = [(view, files) for view, files, _, _ in due if view in _SQL and _top(view) == top]
            try:
                rows = _ROWS[top](made[0][1])
                got = run_sql(rows, *(f"{_SQL[view][1]('src')} ORDER BY ALL" for view, _ in made))
            except (OSError, pa.ArrowException, KeyError):
                continue
            tables.update({view: t.cast(_SQL[view][0]) for (view, _), t in zip(made, got, strict=True)})
        for view, _, sources, folders in due:
            if view in tables:
                written.append(_write_part(run_dir, view, first, tables[view], sources, folders))
    if "ngram_pairs" in views:
        written += _compact_pairs(run_dir, finished, blocks)
    for view in views:  # after the parts: an index older than a part is read around, never trusted
        write_index(run_dir / COMPACTED / view)
    return written


def _compact_pairs(run_dir: Path, finished: list[int], blocks: list[int] | None) -> list[Path]:
    """ngram_pairs' parts (store/ngram_pairs.py), in block order from block 0: each part up to date
    (same files, and made after the chain before it) is kept; the first that is not, and every one
    after it, is made again from the block's ngram_keys against the pairs of the parts before it.
    With `blocks`, only those blocks' parts are written (a run compacting behind itself: its new
    block); a chain broken before them is left for `ts compact`, and `ts sql` reads ngram_keys there."""
    old = {p.first: p for p in parts(run_dir, "ngram_pairs")}
    keys = {p.first: p for p in parts(run_dir, "ngram_keys")}
    previous, seen, written = "", [NGRAM_PAIRS_SCHEMA.empty_table()], []
    for first in finished:
        due = _due(run_dir, "ngram_pairs", first, None)
        if due is None:
            break  # a block without prefix files ends the chain (a GRPO run has none at all)
        _, _, sources, folders = due
        p = old.get(first)
        if p is not None and p.sources == sources and p.holding >= 0 and p.chain == chain_after(previous, p.recorded):
            table, chain = pq.read_table(p.path).cast(NGRAM_PAIRS_SCHEMA), p.chain
        else:
            k = keys.get(first)
            if (blocks is not None and first not in blocks) or k is None or k.sources != sources:
                break  # made from the block's ngram_keys part of the same files, or not at all
            chain = chain_after(previous, k.recorded)  # the same files: the same record as the part will hold
            sql = f"{new_pairs_sql('src', 'seen')} ORDER BY ALL"
            (table,) = run_sql(pq.read_table(k.path), sql, seen=pa.concat_tables(seen))
            table = table.cast(NGRAM_PAIRS_SCHEMA)
            meta = {CHAIN_KEY: chain.encode()}
            written.append(_write_part(run_dir, "ngram_pairs", first, table, sources, folders, meta, k.recorded))
        seen.append(table)
        previous = chain
    return written


def _top(view: str) -> str:
    return PATTERNS[view].split("/iteration=", 1)[0]


def _due(run_dir: Path, view: str, first: int, old: Part | None) -> tuple | None:
    """(view, the block's files, their fingerprints, the settled folders' mtimes) when the block's
    part of `view` is missing or stale; None when it is up to date or not made."""
    pattern = PATTERNS[view]
    # the folders' mtimes before their files are listed (FOLDERS): a file added after this moves them
    settled = time.time_ns() - int(FOLDER_SETTLED_S * 1e9)
    folders = {}
    for k in range(first, first + BLOCK):
        rel = os.path.join(_top(view), f"iteration={k}")
        try:
            mtime = os.stat(run_dir / rel).st_mtime_ns
        except OSError:
            continue
        if mtime < settled:
            folders[rel] = mtime
    files = sorted(
        (f for k in range(first, first + BLOCK) for f in run_dir.glob(pattern.format(k=k))),
        key=lambda f: (int(f.parent.name.split("=", 1)[1]), f.name),
    )
    if not files:
        return None
    sources = _fingerprint(run_dir, files)
    holding = {rel.rpartition(os.sep)[0] for rel in sources}
    folders = {rel: m for rel, m in folders.items() if rel in holding}
    if view == "rollouts" and sum(size for size, _ in sources.values()) > SMALL_FILES * len(files):
        return None  # large files: read one by one (their per-file cost is small), never copied
    if (
        old is not None
        and old.holding >= 0  # else written before Part.holding: made again, so that its folders vouch alone
        and old.lean  # else written with its record twice in the footer: made again, its footer read ~6x faster
        and old.sources == sources
        and all(folders.get(f) == m for f, m in old.folders.items())
    ):
        # up to date (a folder that settled since is not recorded now: its few files are stat'ed instead)
        return None
    return view, files, sources, folders


def _write_part(
    run_dir: Path,
    view: str,
    first: int,
    table: pa.Table,
    sources: dict,
    folders: dict,
    extra: dict | None = None,
    recorded: bytes | None = None,
) -> Path:
    """Write a part with its record of `sources` (`recorded`: that record as another part of the same
    files holds it, else made here) and of the settled `folders`."""
    meta = dict(table.schema.metadata or {}) | (extra or {})
    if recorded is None:  # each source's rows too (its footer, read once here): corpus_files counts rows from the part
        rows = {rel: [*st, pq.read_metadata(run_dir / rel).num_rows] for rel, st in sources.items()}
        recorded = json.dumps(rows, sort_keys=True).encode()
    meta[_SOURCES_KEY] = recorded
    meta[_FOLDERS_KEY] = json.dumps(folders, sort_keys=True).encode()
    meta[_HOLDING_KEY] = str(len({rel.rpartition(os.sep)[0] for rel in sources})).encode()
    path = _part_path(run_dir, view, first)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_table_atomic(table.replace_schema_metadata(None), path, key_value=meta)


_BEHIND: dict[str, threading.Thread] = {}  # run directory -> its compaction thread, one at a time
_BEHIND_LOCK = threading.Lock()


def compact_behind(run_dir: Path, k: int) -> threading.Thread | None:
    """Iteration k has started: when that finishes a block (k a multiple of BLOCK), compact the block
    in a background thread (a daemon: a run that ends or is killed leaves whole parts or none, and
    the next compaction writes what is missing). Never raises: the parts are a cache of the run's
    files, so a failure costs `ts sql` time only. Returns the thread started, if any."""
    if k < BLOCK or k % BLOCK:
        return None
    run_dir = Path(run_dir)
    key = str(run_dir.resolve())

    def work() -> None:
        try:
            # k has no manifest yet (its first stage calls this before it runs): k - 1 is over all the same
            compact(run_dir, blocks=[k - BLOCK], started=k)
        except Exception:  # noqa: BLE001 - a cache: `ts compact` or the next block's compaction retries
            pass

    with _BEHIND_LOCK:
        before = _BEHIND.get(key)
        if before is not None and before.is_alive():
            before.join()  # the last block's is still running (100 iterations ago: a very slow disk)
        thread = threading.Thread(target=work, name=f"compact-{k - BLOCK}", daemon=True)
        _BEHIND[key] = thread
        thread.start()
    return thread


def wait_for_compaction(run_dir: Path) -> None:
    """Wait for the run's background compaction (if any) to end: at the end of a run, so that the
    process does not exit with a part half-written (the rename makes it whole or absent anyway)."""
    with _BEHIND_LOCK:
        thread = _BEHIND.pop(str(Path(run_dir).resolve()), None)
    if thread is not None:
        thread.join()
