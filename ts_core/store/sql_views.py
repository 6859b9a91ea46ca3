"""The views that `thinking_seeds.store.sql.connect` registers (prefixes, rollouts, metrics,
checkpoints, configs: listed with their columns in store/sql.py), built from a run's files.

The Parquet files are opened by pyarrow (one `pyarrow.dataset` per view, with the contract schema
unified with the files' own, i.e. union by name) and registered with DuckDB as Arrow scans;
manifests and configs are read in Python. Nothing here lets SQL open a file: `sql.connect` seals
the connection after `register_views`. Files a run cannot be read from (truncated, a column of the
wrong type) are left out, with one line per file for the caller to report. Only the views asked for
are built (`register_views(..., views=)`): listing and opening every file of a view is most of the
cost of starting a query over a long run.

Prefix files written before the derived columns of PREFIX_FILE_SCHEMA existed (`prefix_len`,
`prefix_ngram_count`, `prefix_ngrams`) get them computed in SQL, so old, new and resumed-by-newer-code
runs read the same. The metrics view
reads a compacted part (store/compaction.py, `ts compact`) instead of the files it copies while
they are unchanged, and every other file as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from thinking_seeds.store.compaction import COMPACTED
from thinking_seeds.store.compaction import PATTERNS as COMPACTED_VIEWS
from thinking_seeds.store.compaction import parts as compacted_parts
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.run_dir import runs_root
from thinking_seeds.store.schemas import (
    DERIVED_PREFIX_SQL,
    NGRAM_COUNTS_SCHEMA,
    PREFIX_DERIVED_FIELDS,
    PREFIX_FILE_SCHEMA,
    PREFIX_SCHEMA,
    ROLLOUT_SCHEMA,
    ngram_counts_sql,
)

__all__ = [
    "CHECKPOINTS_SCHEMA",
    "CONFIGS_SCHEMA",
    "CORPUS_FILES_SCHEMA",
    "METRICS_SCHEMA",
    "VIEWS",
    "list_runs",
    "register_views",
    "view_columns",
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

# What a run directory holds for each Parquet view: glob under the run dir, contract schema.
_PARQUET_VIEWS: dict[str, tuple[str, pa.Schema]] = {
    "prefixes": ("corpus/prefixes/iteration=*/prefixes.parquet", PREFIX_SCHEMA),
    "rollouts": ("rollouts/iteration=*/rollouts.parquet", ROLLOUT_SCHEMA),
    "metrics": ("metrics/iteration=*/*.parquet", METRICS_SCHEMA),
}
_RUN_MARKERS = ("config.yaml", "corpus", "rollouts", "metrics", "checkpoints")


def list_runs(runs_dir: Path | None = None) -> list[Path]:
    """Run directories under `runs_dir` (default runs_root()): folders holding any run data."""
    base = Path(runs_dir) if runs_dir is not None else runs_root()
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if p.is_dir() and any((p / m).exists() for m in _RUN_MARKERS))


def _iteration_of(path: Path) -> int:
    for part in reversed(path.parts):
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


def _readable_files(files: list[Path], contract: pa.Schema, damaged: list[str]) -> list[tuple[Path, pa.Schema]]:
    """(file, its schema) of each readable file; each one that is not is reported in `damaged`."""
    return [(f, schema) for f, schema, _ in _footers(files, contract, damaged)]


def _footers(files: list[Path], contract: pa.Schema, damaged: list[str]) -> list[tuple[Path, pa.Schema, int]]:
    """(file, its schema, its rows) of each readable file; each one that is not is reported in `damaged`."""
    out = []
    for f in files:
        try:
            out.append((f, *_readable(f, contract)))
        except DataError as e:
            damaged.append(str(e))
    return out


def _corpus_files(runs: list[Path], damaged: list[str]) -> pa.Table:
    """The corpus_files view: each readable prefixes/rollouts file with its rows (footer) and size."""
    rows = []
    for view in ("prefixes", "rollouts"):
        pattern, contract = _PARQUET_VIEWS[view]
        files = sorted((f for run in runs for f in run.glob(pattern)), key=_file_order)
        for f, _, n in _footers(files, PREFIX_FILE_SCHEMA if view == "prefixes" else contract, damaged):
            run = f.parents[2] if view == "rollouts" else f.parents[3]
            rows.append(
                {"run_id": run.name, "view": view, "iteration": _iteration_of(f), "rows": n, "bytes": f.stat().st_size}
            )
    return pa.Table.from_pylist(rows, schema=CORPUS_FILES_SCHEMA)


def _dataset(files: list[tuple[Path, pa.Schema]], contract: pa.Schema) -> pads.Dataset:
    """One Arrow dataset over readable `files` with the contract's columns first, plus any extra
    column a file has (union by name); a file missing a column reads it as null."""
    schema = contract
    for _, file_schema in files:
        extra = [fld for fld in file_schema if fld.name not in schema.names]
        if extra:
            schema = pa.schema(list(schema) + extra)
    return pads.dataset([str(f) for f, _ in files], schema=schema, format="parquet")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _register_prefixes(con: duckdb.DuckDBPyConnection, files: list[tuple[Path, pa.Schema]], view: str) -> None:
    """A view named `view` over prefix files (the prefixes view, or an internal one over some of
    them): files that carry the derived columns (PREFIX_DERIVED_FIELDS) are read as they are; files
    written before those columns existed get them computed here, in SQL, from the columns they were
    derived from, so both kinds read the same. Old files first (they hold the earlier iterations of
    a run that was resumed by newer code)."""
    derived = [f.name for f in PREFIX_DERIVED_FIELDS]
    new = [(f, sch) for f, sch in files if all(n in sch.names for n in derived)]
    old = [(f, sch) for f, sch in files if not all(n in sch.names for n in derived)]
    parts = []  # (internal name, dataset)
    if old:
        parts.append((f"_ts_{view}_v1", _dataset(old, PREFIX_SCHEMA)))
    if new or not old:  # with no file at all, the view still has the contract's columns
        parts.append((f"_ts_{view}", _dataset(new, PREFIX_FILE_SCHEMA)))
    columns = list(PREFIX_FILE_SCHEMA.names)
    for _, ds in parts:
        columns += [n for n in ds.schema.names if n not in columns]
    computed = DERIVED_PREFIX_SQL
    selects = []
    for name, ds in parts:
        con.register(name, ds)
        have = set(ds.schema.names)
        cols = []
        for c in columns:
            if c in have:
                cols.append(_quoted(c))
            elif c in computed:
                cols.append(f"{computed[c]} AS {_quoted(c)}")
            else:
                cols.append(f"NULL AS {_quoted(c)}")
        selects.append(f"SELECT {', '.join(cols)} FROM {name}")
    con.execute(f"CREATE VIEW {view} AS {' UNION ALL '.join(selects)}")


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def _checkpoints(runs: list[Path]) -> pa.Table:
    rows = []
    for run in runs:
        for manifest in sorted((run / "checkpoints").glob("step_*/manifest.json")):
            try:
                m = json.loads(manifest.read_text())
            except (OSError, json.JSONDecodeError):
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


def _configs(runs: list[Path]) -> pa.Table:
    rows = []
    for run in runs:
        path = run / "config.yaml"
        cfg: dict[str, Any] = {}
        created = None
        if path.is_file():
            import yaml  # here, not at the top: `ts sql` over other views never needs it

            try:
                cfg = yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError):
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


def _fresh_parts(run: Path, kind: str, pattern: str) -> tuple[list[Path], list[Path]]:
    """(the run's compacted parts of `kind` that are still fresh, every file of `pattern` none of them
    stands for): store/compaction.py's parts replace their files only while those are unchanged."""
    fresh = [p for p in compacted_parts(run, kind) if p.fresh(run)]
    covered = {run / rel for p in fresh for rel in p.sources}
    return [p.path for p in fresh], [f for f in run.glob(pattern) if f not in covered]


def _files(run: Path, view: str, pattern: str) -> list[Path]:
    """The files a view reads in one run: fresh compacted parts and the files they do not stand for."""
    if view not in COMPACTED_VIEWS:
        return list(run.glob(pattern))
    parts_, rest = _fresh_parts(run, view, pattern)
    return parts_ + rest


def _file_order(f: Path) -> tuple:
    """Run, then iteration (a compacted part at its first iteration), then name."""
    if f.parent.parent.name == COMPACTED:
        return (f.parts[:-3], _part_first(f), "")
    return (f.parts[:-3], _iteration_of(f), f.name)


def _part_first(f: Path) -> int:
    try:
        return int(f.name.split("=", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return -1


VIEWS: tuple[str, ...] = ("prefixes", "rollouts", "metrics", "checkpoints", "configs", "corpus_files", "ngram_counts")


def _register_ngram_counts(con: duckdb.DuckDBPyConnection, runs: list[Path], damaged: list[str]) -> None:
    """The ngram_counts view (schemas.NGRAM_COUNTS_SCHEMA): the fresh compacted parts of each run
    (store/compaction.py, written by `ts compact` and the report flow for finished iterations), and
    for every prefix file no fresh part stands for, the same rows computed here from the file."""
    pattern = _PARQUET_VIEWS["prefixes"][0]
    parts_: list[Path] = []
    rest: list[Path] = []
    for run in runs:
        p, r = _fresh_parts(run, "ngram_counts", pattern)
        parts_ += p
        rest += r
    rest.sort(key=_file_order)
    _register_prefixes(con, _readable_files(rest, PREFIX_FILE_SCHEMA, damaged), "_ts_ngram_src")
    stored = _readable_files(parts_, NGRAM_COUNTS_SCHEMA, damaged)
    con.register("_ts_ngram_parts", _dataset(stored, NGRAM_COUNTS_SCHEMA))
    cols = ", ".join(NGRAM_COUNTS_SCHEMA.names)
    con.execute(
        f"CREATE VIEW ngram_counts AS SELECT {cols} FROM _ts_ngram_parts "
        f"UNION ALL SELECT {cols} FROM ({ngram_counts_sql('_ts_ngram_src', dedupe=False)})"
    )


def register_views(
    con: duckdb.DuckDBPyConnection, runs: list[Path], damaged: list[str], views: Iterable[str] | None = None
) -> None:
    """Create the views `views` (default: all of VIEWS) over the run directories `runs` on `con`; a
    file that cannot be read is left out and one line naming it is appended to `damaged`.

    A view's files are listed and checked only when the view is asked for: on a long run most of
    `ts sql`'s start is opening every Parquet file's footer (BENCHMARKS.md, "SQL over the prefix corpus")."""
    wanted = set(VIEWS if views is None else views)
    unknown = wanted - set(VIEWS)
    if unknown:
        raise ValueError(f"unknown view(s) {sorted(unknown)}; known: {', '.join(VIEWS)}")
    for view, (pattern, contract) in _PARQUET_VIEWS.items():
        if view not in wanted:
            continue
        files = sorted((f for run in runs for f in _files(run, view, pattern)), key=_file_order)
        if view == "prefixes":
            _register_prefixes(con, _readable_files(files, PREFIX_FILE_SCHEMA, damaged), "prefixes")
            continue
        con.register(f"_ts_{view}", _dataset(_readable_files(files, contract, damaged), contract))
        con.execute(f"CREATE VIEW {view} AS SELECT * FROM _ts_{view}")
    if "ngram_counts" in wanted:
        _register_ngram_counts(con, runs, damaged)
    tables = {"checkpoints": _checkpoints, "configs": _configs, "corpus_files": lambda r: _corpus_files(r, damaged)}
    for view, build in tables.items():
        if view in wanted:
            con.register(f"_ts_{view}", build(runs))
            con.execute(f"CREATE VIEW {view} AS SELECT * FROM _ts_{view}")


def view_columns() -> dict[str, list[str]]:
    """{view: [column, ...]} of the public views, as `connect()` creates them (files may add columns)."""
    out = {view: list(schema.names) for view, (_, schema) in _PARQUET_VIEWS.items()}
    out["prefixes"] = list(PREFIX_FILE_SCHEMA.names)
    out["checkpoints"] = list(CHECKPOINTS_SCHEMA.names)
    out["configs"] = list(CONFIGS_SCHEMA.names)
    out["corpus_files"] = list(CORPUS_FILES_SCHEMA.names)
    out["ngram_counts"] = list(NGRAM_COUNTS_SCHEMA.names)
    return out
