"""The views that `thinking_seeds.store.sql.connect` registers (prefixes, rollouts, metrics,
checkpoints, configs: listed with their columns in store/sql.py), built from a run's files.

The Parquet files are opened by pyarrow (one `pyarrow.dataset` per view, with the contract schema
unified with the files' own, i.e. union by name) and registered with DuckDB as Arrow scans;
manifests and configs are read in Python. Nothing here lets SQL open a file: `sql.connect` seals
the connection after `register_views`. Files a run cannot be read from (truncated, a column of the
wrong type) are left out, with one line per file for the caller to report.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import yaml

from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.run_dir import runs_root
from thinking_seeds.store.schemas import PREFIX_SCHEMA, ROLLOUT_SCHEMA

__all__ = ["CHECKPOINTS_SCHEMA", "CONFIGS_SCHEMA", "METRICS_SCHEMA", "list_runs", "register_views", "view_columns"]

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


def _readable(f: Path, contract: pa.Schema) -> pa.Schema:
    """The file's schema, or DataError (one line: which file, what is wrong, how to fix)."""
    run = next((p for p in f.parents if (p / "config.yaml").is_file()), None)
    fix = f"run `ts check {run.name}` and re-run the stage it names" if run else "rewrite or remove it"
    try:
        file_schema = pq.read_schema(f)
    except (OSError, pa.ArrowInvalid) as e:
        raise DataError(f"cannot read Parquet file {f} ({' '.join(str(e).split())}): {fix}") from None
    for fld in file_schema:
        if fld.name in contract.names and not _compatible(fld.type, contract.field(fld.name).type):
            raise DataError(
                f"Parquet file {f}: column {fld.name!r} is {fld.type}, expected {contract.field(fld.name).type}: {fix}"
            )
    return file_schema


def _dataset(files: list[Path], contract: pa.Schema, damaged: list[str]) -> pads.Dataset:
    """One Arrow dataset over the readable `files` with the contract's columns first, plus any
    extra column a file has (union by name); a file missing a column reads it as null. Files that
    cannot be read are left out, and the reason is appended to `damaged`."""
    schema, good = contract, []
    for f in files:
        try:
            file_schema = _readable(f, contract)
        except DataError as e:
            damaged.append(str(e))
            continue
        good.append(f)
        extra = [fld for fld in file_schema if fld.name not in schema.names]
        if extra:
            schema = pa.schema(list(schema) + extra)
    return pads.dataset([str(f) for f in good], schema=schema, format="parquet")


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
            try:
                cfg = yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError):
                cfg = {}
            created = datetime.fromtimestamp(int(path.stat().st_mtime), tz=UTC)
        if not isinstance(cfg, dict):
            cfg = {}

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


def register_views(con: duckdb.DuckDBPyConnection, runs: list[Path], damaged: list[str]) -> None:
    """Create every view over the run directories `runs` on `con`; a file that cannot be read is
    left out and one line naming it is appended to `damaged`."""
    for view, (pattern, contract) in _PARQUET_VIEWS.items():
        files = sorted(
            (f for run in runs for f in run.glob(pattern)), key=lambda f: (f.parts[:-3], _iteration_of(f), f.name)
        )
        con.register(f"_ts_{view}", _dataset(files, contract, damaged))
        extra = ", len(prefix_token_ids) AS prefix_len" if view == "prefixes" else ""
        con.execute(f"CREATE VIEW {view} AS SELECT *{extra} FROM _ts_{view}")
    for view, table in (("checkpoints", _checkpoints(runs)), ("configs", _configs(runs))):
        con.register(f"_ts_{view}", table)
        con.execute(f"CREATE VIEW {view} AS SELECT * FROM _ts_{view}")


def view_columns() -> dict[str, list[str]]:
    """{view: [column, ...]} of the public views, as `connect()` creates them (files may add columns)."""
    out = {view: list(schema.names) for view, (_, schema) in _PARQUET_VIEWS.items()}
    out["prefixes"].append("prefix_len")
    out["checkpoints"] = list(CHECKPOINTS_SCHEMA.names)
    out["configs"] = list(CONFIGS_SCHEMA.names)
    return out
