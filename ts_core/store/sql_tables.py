"""The views `ts sql` builds in Python rather than over Parquet files: checkpoints (the historical
pool's snapshot manifests), configs (each run's config.yaml) and corpus_files (one row per prefixes
or rollouts Parquet file, from its footer: row counts without scanning 10M rows, the `runs` query).
Each is one Arrow table, registered by store/sql_views.py.
"""

from __future__ import annotations

import functools
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from thinking_seeds.store.contained import link_out, read_small
from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA
from thinking_seeds.store.sql_files import PARQUET_VIEWS, file_order, footers, fresh_parts_of, iteration_of, listed

__all__ = ["CHECKPOINTS_SCHEMA", "CONFIGS_SCHEMA", "CORPUS_FILES_SCHEMA", "checkpoints", "configs", "corpus_files"]

CHECKPOINTS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("step", pa.int64()),
        pa.field("created_at", pa.timestamp("s", tz="UTC")),
        pa.field("param_count", pa.int64()),
        pa.field("path", pa.string()),
    ]
)

CONFIGS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("algorithm", pa.string()),
        pa.field("iterations", pa.int64()),
        pa.field("seed", pa.int64()),
        pa.field("model_path", pa.string()),
        pa.field("created_at", pa.timestamp("s", tz="UTC")),
        pa.field("config_json", pa.string()),
    ]
)

# One row per Parquet file of the corpus (prefixes and rollouts), from the file footers: what a
# query needs to count rows per run or iteration without scanning 10M rows (the `runs` query).
CORPUS_FILES_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("view", pa.string()),  # prefixes | rollouts
        pa.field("iteration", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("bytes", pa.int64()),
    ]
)


# The compacted parts (store/compaction.py) whose sources are each view's files, with their rows: a
# run of many small iterations counts the files a fresh part stands for without opening each footer,
# and without listing the folders the part vouches for (compaction.FOLDERS).
_COUNTED_BY = {"prefixes": ("prefix_groups",), "rollouts": ("rollout_groups", "rollouts")}


def corpus_files(runs: list[Path], damaged: list[str]) -> pa.Table:
    """The corpus_files view: each readable prefixes/rollouts file with its rows (footer, or the fresh
    compacted part that recorded them) and size; by view, run, iteration and file name."""
    run_ids: list[str] = []
    views: list[str] = []
    rows: list[tuple[int, str, int, int]] = []  # (iteration, file name, rows, bytes): _file_row
    for view in ("prefixes", "rollouts"):
        pattern, contract = PARQUET_VIEWS[view]
        for run in sorted(runs, key=lambda r: r.name):
            root = os.fspath(run) + os.sep
            known: dict[str, tuple[int, str, int, int]] = {}  # file relative to the run -> its row
            fresh, skip, _ = fresh_parts_of(run, _COUNTED_BY[view])
            for part in fresh:
                counted = _counted(part.recorded)
                if counted is not None:
                    known.update(counted)
                else:  # a part from before rows were recorded: its folders are listed, their footers read
                    skip -= {root + rel.rpartition(os.sep)[0] for rel in part.sources}
            # strings: most files are counted by a part (94k Paths at 1M prefixes of 64 per file: ~0.5 s)
            files = [f for f in listed(run, pattern, skip) if f[len(root) :] not in known]
            read = footers(
                sorted(map(Path, files), key=file_order),
                PREFIX_FILE_SCHEMA if view == "prefixes" else contract,
                damaged,
            )
            for f, _, n in read:
                rel = os.fspath(f)[len(root) :]
                known[rel] = _file_row(rel, n, f.stat().st_size)
            rows += sorted(known.values())  # by iteration, then file name
            run_ids += [run.name] * len(known)
            views += [view] * len(known)
    iteration, _, counts, size = zip(*rows, strict=True) if rows else [()] * 4
    columns = [run_ids, views, iteration, counts, size]  # columns, not 31k dicts at 1M prefixes
    return pa.table(
        [pa.array(c, f.type) for c, f in zip(columns, CORPUS_FILES_SCHEMA, strict=True)], schema=CORPUS_FILES_SCHEMA
    )


@functools.lru_cache(maxsize=1024)
def _counted(recorded: bytes) -> dict[str, tuple[int, str, int, int]] | None:
    """{file relative to the run: its corpus_files row} from a compacted part's record of its sources
    ({path: [size, mtime_ns, rows]}); None for a part written before rows were recorded. One pass over
    the record: at 1M prefixes of 64 per file `runs` reads 31k of them, and each step per file shows."""
    out = {}
    for rel, (size, _, *n) in json.loads(recorded).items():
        if not n:
            return None
        out[rel] = _file_row(rel, n[0], size)
    return out


def _file_row(rel: str, rows: int, size: int) -> tuple[int, str, int, int]:
    """(iteration, file name, rows, bytes) of the file `rel` (<view's folder>/iteration=K/<name>). K of
    its folder; an archived run's corpus is one `iteration=all` file: -1, as iteration_of says."""
    folder, _, name = rel.rpartition(os.sep)
    folder = folder.rpartition(os.sep)[2]
    tail = folder[10:]
    k = int(tail) if folder.startswith("iteration=") and tail.lstrip("-").isdigit() else iteration_of(rel)
    return k, name, int(rows), int(size)


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def checkpoints(runs: list[Path]) -> pa.Table:
    """The checkpoints view: one row per readable pool snapshot manifest."""
    rows = []
    for run in runs:
        for manifest in sorted((run / "checkpoints").glob("step_*/manifest.json")):
            if link_out(run, manifest) is not None:  # not read through a link out of the run
                continue
            try:
                m = json.loads(read_small(manifest))
            except (OSError, ValueError):  # ValueError: JSON's, or DataError (a link, a FIFO, a huge file)
                continue  # a snapshot being written (or torn): not part of the pool
            rows.append(
                {
                    "run_id": run.name,
                    "step": m.get("step"),
                    "created_at": _parse_time(m.get("created_at")),
                    "param_count": m.get("param_count"),
                    "path": str(manifest.parent),
                }
            )
    return pa.Table.from_pylist(rows, schema=CHECKPOINTS_SCHEMA)


def configs(runs: list[Path], damaged: list[str]) -> pa.Table:
    """The configs view: one row per run, from its config.yaml (nulls where it has none, or where it
    is damaged: named in `damaged`; a YAML bomb is refused unexpanded, thinking_seeds.yaml_limits)."""
    rows = []
    for run in runs:
        path = run / "config.yaml"
        cfg: dict[str, Any] = {}
        created = None
        if (out := link_out(run, path.name)) is not None:
            damaged.append(f"{out}; left out of the configs view")
        elif path.is_file():
            import yaml  # here, not at the top: `ts sql` over other views never needs it

            from thinking_seeds.yaml_limits import read_bounded

            try:
                cfg = read_bounded(path) or {}
            except (OSError, ValueError, yaml.YAMLError) as e:  # ValueError: over the limits (YamlLimitError)
                why = f"it {e}" if isinstance(e, ValueError) else " ".join(str(e).split())[:200]
                damaged.append(f"{path} is damaged ({why}); left out of the configs view; see `ts check {run.name}`")
                cfg = {}
            created = datetime.fromtimestamp(int(path.stat().st_mtime), tz=UTC)
        if not isinstance(cfg, dict):
            cfg = {}
        ext = run / "extension.json"  # an extended run's end (config/loading.py EXTENSION_FILE; not imported:
        # `ts sql` starts without pydantic); config.yaml keeps its start
        if cfg and ext.is_file():
            try:
                cfg = {**cfg, "iterations": json.loads(ext.read_text())["iterations"]}
            except (OSError, ValueError, KeyError, TypeError):
                pass

        def _int(v: Any) -> int | None:
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
        rows.append(
            {
                "run_id": run.name,
                "algorithm": cfg.get("algorithm"),
                "iterations": _int(cfg.get("iterations")),
                "seed": _int(cfg.get("seed")),
                "model_path": model.get("path"),
                "created_at": created,
                "config_json": json.dumps(cfg, sort_keys=True, default=str) if cfg else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=CONFIGS_SCHEMA)
