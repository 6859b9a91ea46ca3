"""Read-only DuckDB over run directories: the prefix corpus, rollouts, metrics and pool snapshots.

    con = connect("my-run")                 # one run; connect() = every run under runs_root()
    query(con, "SELECT kind, avg(reward) FROM rollouts GROUP BY kind")
    run_named(con, "seeded_solve_rate")     # see NAMED_QUERIES / `ts sql --list`

Views (each exists even when a run has no such data yet, empty with the contract's columns):

    prefixes     the prefix corpus (thinking_seeds.store.schemas.PREFIX_SCHEMA) + prefix_len = len(prefix_token_ids)
    rollouts     verified rollouts (ROLLOUT_SCHEMA), rollouts/iteration=K/rollouts.parquet
    metrics      long format: run_id, iteration, stage, name, value. Stage metrics of iteration k
                 are labelled k; evaluate metrics are labelled with the policy step (θ_{k+1} -> k+1).
    checkpoints  the historical pool's snapshots: run_id, step, created_at, param_count, path
    configs      one row per run: run_id, algorithm, iterations, seed, model_path, created_at, config_json

Read-only, enforced twice, by structure rather than by keywords:

1. By the engine. The Parquet files are opened by pyarrow (one `pyarrow.dataset` per view, with
   the contract schema unified with the files' own, i.e. union by name), registered with DuckDB
   as Arrow scans; manifests and configs are read in Python. Only then is the connection sealed:
   no temp directory (DuckDB otherwise allows file access under it, ./.tmp by default), no allowed
   directories, `enable_external_access=false` (no file system access at all from SQL: COPY ... TO,
   ATTACH, EXPORT, read_text/read_csv of any path, extension installs all fail), capped memory and
   threads, and `lock_configuration=true` (no SET can reopen any of it).
2. By `query()`: every statement is classified by DuckDB's own parser (`extract_statements`,
   `tokenize`) and only plain queries run: SELECT (which covers FROM-first, VALUES, DESCRIBE,
   SHOW, SUMMARIZE, static PIVOT), a dynamic PIVOT / UNPIVOT statement (which DuckDB plans as
   several statements), and EXPLAIN of one of those. Anything else -- including a CREATE or COPY
   wrapped around a dynamic PIVOT -- is refused with a QueryError before anything executes, so a
   script mixing a SELECT with a DROP runs nothing. Every query has a timeout (`con.interrupt()`),
   and Ctrl-C interrupts it.

Files a run cannot be read from (truncated, a column of the wrong type) are left out of the views
with a warning naming the file, so one damaged run never takes `ts runs` or `ts sql` over all runs
down; `ts check RUN` says what to re-run.

This module never imports prefect.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import yaml

from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.run_dir import check_run_id, runs_root
from thinking_seeds.store.schemas import PREFIX_SCHEMA, ROLLOUT_SCHEMA

__all__ = [
    "METRICS_SCHEMA",
    "NAMED_QUERIES",
    "QueryError",
    "QueryResult",
    "check_read_only",
    "connect",
    "list_runs",
    "query",
    "run_named",
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

# What a run directory holds for each Parquet view: glob under the run dir, contract schema.
_PARQUET_VIEWS: dict[str, tuple[str, pa.Schema]] = {
    "prefixes": ("corpus/prefixes/iteration=*/prefixes.parquet", PREFIX_SCHEMA),
    "rollouts": ("rollouts/iteration=*/rollouts.parquet", ROLLOUT_SCHEMA),
    "metrics": ("metrics/iteration=*/*.parquet", METRICS_SCHEMA),
}
_RUN_MARKERS = ("config.yaml", "corpus", "rollouts", "metrics", "checkpoints")
DEFAULT_TIMEOUT_S = 60.0
MEMORY_LIMIT = "2GB"  # DuckDB's own memory (Arrow scans are read by pyarrow)
THREADS = 2


class DamagedFileWarning(UserWarning):
    """A run file that cannot be read was left out of the views (the message names it)."""


class QueryError(ValueError):
    """A query was refused (it could change something) or failed; the message says why."""


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)


# ---------------------------------------------------------------------------------------------
# connect
# ---------------------------------------------------------------------------------------------


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
            raise DataError(f"Parquet file {f}: column {fld.name!r} is {fld.type}, expected "
                            f"{contract.field(fld.name).type}: {fix}")
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
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def _checkpoints(runs: list[Path]) -> pa.Table:
    rows = []
    for run in runs:
        for manifest in sorted((run / "checkpoints").glob("step_*/manifest.json")):
            try:
                m = json.loads(manifest.read_text())
            except (OSError, json.JSONDecodeError):
                continue  # a snapshot being written (or torn): not part of the pool
            rows.append({"run_id": run.name, "step": m.get("step"), "created_at": _parse_time(m.get("created_at")),
                         "param_count": m.get("param_count"), "path": str(manifest.parent)})
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
            created = datetime.fromtimestamp(int(path.stat().st_mtime), tz=timezone.utc)
        if not isinstance(cfg, dict):
            cfg = {}

        def _int(v: Any) -> int | None:
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
        rows.append({"run_id": run.name, "algorithm": cfg.get("algorithm"), "iterations": _int(cfg.get("iterations")),
                     "seed": _int(cfg.get("seed")), "model_path": model.get("path"), "created_at": created,
                     "config_json": json.dumps(cfg, sort_keys=True, default=str) if cfg else None})
    return pa.Table.from_pylist(rows, schema=CONFIGS_SCHEMA)


def connect(run_id: str | None = None, runs_dir: Path | None = None,
            damaged: list[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory, sealed DuckDB connection with the views of one run (or all runs under runs_dir).

    Raises DataError when `run_id` names no run directory. The connection sees the files that
    exist now; open a new one to see files written later. Unreadable files are left out: one line
    per file is appended to `damaged` when given, else issued as a DamagedFileWarning.
    """
    base = Path(runs_dir) if runs_dir is not None else runs_root()
    if run_id is not None:
        try:
            check_run_id(run_id)
        except ValueError as e:
            raise DataError(str(e)) from None
        root = base / run_id
        if not root.is_dir():
            known = ", ".join(p.name for p in list_runs(base)) or "none"
            raise DataError(f"no run {run_id!r} under {base} (known runs: {known}); set TS_RUNS_DIR or --runs-dir to look elsewhere")
        runs = [root]
    else:
        runs = list_runs(base)

    notes: list[str] = []
    con = duckdb.connect(":memory:")
    try:
        for view, (pattern, contract) in _PARQUET_VIEWS.items():
            files = sorted((f for run in runs for f in run.glob(pattern)), key=lambda f: (f.parts[:-3], _iteration_of(f), f.name))
            con.register(f"_ts_{view}", _dataset(files, contract, notes))
            extra = ", len(prefix_token_ids) AS prefix_len" if view == "prefixes" else ""
            con.execute(f"CREATE VIEW {view} AS SELECT *{extra} FROM _ts_{view}")
        for view, table in (("checkpoints", _checkpoints(runs)), ("configs", _configs(runs))):
            con.register(f"_ts_{view}", table)
            con.execute(f"CREATE VIEW {view} AS SELECT * FROM _ts_{view}")
        _seal(con)
    except BaseException:
        con.close()
        raise
    if damaged is not None:
        damaged.extend(notes)
    else:
        for note in notes:
            warnings.warn(note, DamagedFileWarning, stacklevel=2)
    return con


def _seal(con: duckdb.DuckDBPyConnection) -> None:
    """From here on no SQL can reach the file system, hold more than its share of the machine, or
    loosen these settings. The temp directory goes first: DuckDB keeps file access open under it
    even with external access disabled (and defaults it to ./.tmp)."""
    for setting in ("temp_directory=''", "allowed_directories=[]", "allowed_paths=[]",
                    f"memory_limit='{MEMORY_LIMIT}'", f"threads={THREADS}", "python_enable_replacements=false",
                    "autoinstall_known_extensions=false", "autoload_known_extensions=false",
                    "enable_external_access=false", "lock_configuration=true"):
        con.execute(f"SET {setting}")


# ---------------------------------------------------------------------------------------------
# read-only queries
# ---------------------------------------------------------------------------------------------

_ALLOWED = "SELECT, FROM ..., VALUES, WITH ... SELECT, DESCRIBE, SHOW, SUMMARIZE, PIVOT, UNPIVOT, EXPLAIN of a query"


def _kind(stmt: Any) -> str:
    return str(stmt.type).rsplit(".", 1)[-1].upper()


def _keywords(sql: str) -> list[tuple[str, int]]:
    """(lower-cased word, end offset) of each token of `sql`, by DuckDB's tokenizer; comments dropped."""
    tokens = duckdb.tokenize(sql)
    out = []
    for i, (start, kind) in enumerate(tokens):
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        if kind != duckdb.token_type.comment:
            out.append((sql[start:end].strip().lower(), end))
    return out


def _is_query(con: duckdb.DuckDBPyConnection, stmt: Any) -> bool:
    """Whether one parsed statement only reads: a SELECT; a dynamic PIVOT/UNPIVOT, which DuckDB plans
    as several statements (MULTI) -- accepted only when the statement itself *is* the PIVOT, not a
    CREATE or COPY around one; or EXPLAIN (not ANALYZE of anything else) of one of these."""
    kind = _kind(stmt)
    if kind == "SELECT":
        return True
    words = _keywords(stmt.query or "")
    if kind == "MULTI":
        return bool(words) and words[0][0] in ("pivot", "unpivot", "pivot_wider", "pivot_longer")
    if kind == "EXPLAIN" and words and words[0][0] == "explain":
        skip = 2 if len(words) > 1 and words[1][0] == "analyze" else 1
        rest = (stmt.query or "")[words[skip - 1][1]:]
        try:
            inner = con.extract_statements(rest)
        except duckdb.Error:
            return False
        return len(inner) == 1 and _is_query(con, inner[0])
    return False


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> list[Any]:
    """Parse `sql` and return its statements if every one only reads; else raise QueryError."""
    if not sql or not sql.strip():
        raise QueryError("empty query")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(f"cannot parse the query: {' '.join(str(e).split())}") from None
    if not statements:
        raise QueryError("empty query")
    for st in statements:
        if not _is_query(con, st):
            snippet = " ".join((st.query or "").split())[:80]
            raise QueryError(
                f"refused {_kind(st)} statement ({snippet!r}): queries over run data are read-only; "
                f"allowed: {_ALLOWED}"
            )
    return statements


def _execute(con: duckdb.DuckDBPyConnection, statements: list[Any], box: dict) -> None:
    """Run the statements (in a worker thread) and leave the last one's columns and rows in `box`."""
    try:
        cur = None
        for st in statements:
            cur = con.execute(st)
        assert cur is not None
        box["columns"] = [d[0] for d in cur.description] if cur.description else []
        box["rows"] = cur.fetchall() if cur.description else []
    except BaseException as e:  # handed to the caller's thread
        box["error"] = e
    finally:
        box["done"].set()


def query(con: duckdb.DuckDBPyConnection, sql: str, timeout: float | None = DEFAULT_TIMEOUT_S) -> QueryResult:
    """Run read-only SQL (one or more statements, all checked before any runs); the last one's rows.

    The statements run in a worker thread while this one waits, so a timeout or Ctrl-C can stop
    them with `con.interrupt()` (DuckDB holds no Python signal handler while it computes): a query
    that never ends comes back as a QueryError after `timeout` seconds (None: no limit), and
    KeyboardInterrupt is re-raised once the engine has stopped.
    """
    statements = check_read_only(con, sql)
    # An Event, not Thread.join: a join cut short by KeyboardInterrupt can report a running thread
    # as finished, and closing the connection under it then fails ("connection is busy").
    done = threading.Event()
    box: dict[str, Any] = {"done": done}
    worker = threading.Thread(target=_execute, args=(con, statements, box), daemon=True, name="ts-sql")
    deadline = None if not timeout else time.monotonic() + timeout
    worker.start()
    try:
        while not done.wait(0.05):
            if deadline is not None and time.monotonic() > deadline:
                con.interrupt()
                done.wait(10)
                raise QueryError(f"query timed out after {timeout:g} s and was stopped; narrow it (WHERE, LIMIT) "
                                 f"or allow more time with --timeout SECONDS")
    except KeyboardInterrupt:
        con.interrupt()
        done.wait(10)
        raise
    err = box.get("error")
    if isinstance(err, duckdb.Error):
        raise QueryError(f"{type(err).__name__}: {' '.join(str(err).split())}") from None
    if err is not None:
        raise err
    return QueryResult(box["columns"], box["rows"])


def run_named(con: duckdb.DuckDBPyConnection, name: str, timeout: float | None = DEFAULT_TIMEOUT_S) -> QueryResult:
    if name not in NAMED_QUERIES:
        raise QueryError(f"unknown named query {name!r}; known: {', '.join(NAMED_QUERIES)} (see `ts sql --list`)")
    return query(con, NAMED_QUERIES[name][1], timeout)


# ---------------------------------------------------------------------------------------------
# named queries
# ---------------------------------------------------------------------------------------------

# Prefix length bucket (tokens): 0, 1, 2-3, 4-7, 8-15, ... (powers of two); lo is the bucket's
# lower bound, used for ordering. log2(L + 0.5) never lands on an integer, so floor is exact.
def _len_lo(col: str) -> str:
    return f"CASE WHEN {col} <= 0 THEN 0 ELSE CAST(pow(2, floor(log2({col} + 0.5))) AS BIGINT) END"


def _len_label(lo: str) -> str:
    return f"CASE WHEN {lo} <= 1 THEN CAST({lo} AS VARCHAR) ELSE {lo} || '-' || (2 * {lo} - 1) END"


_PREFIX_DIVERSITY = f"""
WITH p AS (
    SELECT run_id, source_age, prefix_len AS L, {_len_lo('prefix_len')} AS len_lo, prefix_text
    FROM prefixes
),
g0 AS (  -- one row per character position that starts a 3-gram
    SELECT run_id, source_age, len_lo, prefix_text,
           unnest(generate_series(1, length(prefix_text) - 2)) AS pos
    FROM p
),
g AS (SELECT run_id, source_age, len_lo, substring(prefix_text, pos, 3) AS gram FROM g0),
pc AS (
    SELECT run_id, 'source_age' AS breakdown, source_age AS key, count(*) AS prefixes, avg(L) AS mean_prefix_len FROM p GROUP BY ALL
    UNION ALL
    SELECT run_id, 'prefix_len', len_lo, count(*), avg(L) FROM p GROUP BY ALL
    UNION ALL
    SELECT run_id, 'all', NULL, count(*), avg(L) FROM p GROUP BY ALL
),
gc AS (
    SELECT run_id, 'source_age' AS breakdown, source_age AS key, count(*) AS ngrams, count(DISTINCT gram) AS distinct_ngrams FROM g GROUP BY ALL
    UNION ALL
    SELECT run_id, 'prefix_len', len_lo, count(*), count(DISTINCT gram) FROM g GROUP BY ALL
    UNION ALL
    SELECT run_id, 'all', NULL, count(*), count(DISTINCT gram) FROM g GROUP BY ALL
)
SELECT pc.run_id, pc.breakdown,
       CASE pc.breakdown WHEN 'all' THEN 'all'
                  WHEN 'prefix_len' THEN {_len_label('pc.key')}
                  ELSE CASE WHEN pc.key < 0 THEN 'dataset' ELSE CAST(pc.key AS VARCHAR) END END AS bucket,
       pc.prefixes, pc.mean_prefix_len,
       coalesce(gc.ngrams, 0) AS ngrams, coalesce(gc.distinct_ngrams, 0) AS distinct_ngrams,
       gc.distinct_ngrams / nullif(gc.ngrams, 0) AS distinct_ratio
FROM pc LEFT JOIN gc ON pc.run_id = gc.run_id AND pc.breakdown = gc.breakdown AND pc.key IS NOT DISTINCT FROM gc.key
ORDER BY pc.run_id, CASE pc.breakdown WHEN 'source_age' THEN 0 WHEN 'prefix_len' THEN 1 ELSE 2 END, pc.key
"""

_SEEDED_SOLVE_RATE = f"""
WITH r AS (
    SELECT run_id, iteration, kind, source_step,
           CASE WHEN source_step IS NULL OR source_step < 0 THEN NULL ELSE iteration - source_step END AS source_age,
           {_len_lo('prefix_len')} AS len_lo,
           CAST(status = 'ok' AS DOUBLE) AS solved, reward
    FROM rollouts
    WHERE reward IS NOT NULL
),
onp AS (  -- on-policy solve rate per iteration: the baseline, weighted like each group's samples
    SELECT run_id, iteration, avg(solved) AS on_rate FROM r WHERE kind = 'on_policy' GROUP BY ALL
),
rj AS (SELECT r.*, onp.on_rate FROM r LEFT JOIN onp USING (run_id, iteration)),
s AS (
    SELECT run_id, kind, 'all' AS breakdown, NULL::BIGINT AS key, count(*) AS samples, avg(solved) AS solve_rate,
           avg(reward) AS mean_reward, avg(on_rate) AS on_policy_solve_rate
    FROM rj GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'source_step', source_step, count(*), avg(solved), avg(reward), avg(on_rate)
    FROM rj WHERE kind <> 'on_policy' GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'source_age', source_age, count(*), avg(solved), avg(reward), avg(on_rate)
    FROM rj WHERE kind <> 'on_policy' GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'prefix_len', len_lo, count(*), avg(solved), avg(reward), avg(on_rate)
    FROM rj WHERE kind <> 'on_policy' GROUP BY ALL
)
SELECT run_id, kind, breakdown,
       CASE breakdown WHEN 'all' THEN 'all'
               WHEN 'prefix_len' THEN {_len_label('key')}
               ELSE CASE WHEN key IS NULL OR key < 0 THEN 'dataset' ELSE CAST(key AS VARCHAR) END END AS bucket,
       samples, solve_rate, mean_reward, on_policy_solve_rate,
       solve_rate - on_policy_solve_rate AS vs_on_policy
FROM s
ORDER BY run_id,
         CASE kind WHEN 'on_policy' THEN 0 WHEN 'seeded' THEN 1 ELSE 2 END,
         CASE breakdown WHEN 'all' THEN 0 WHEN 'source_step' THEN 1 WHEN 'source_age' THEN 2 ELSE 3 END,
         key
"""

_POPS = ("on_policy", "continuation", "prefix", "all")


def _pop_cols(metric: str, alias: str) -> str:
    return ",\n       ".join(
        f"max(value) FILTER (WHERE name = 'actor/{metric}/{p}') AS {alias}_{p}" for p in _POPS
    )


_ENTROPY_ACCURACY = f"""
SELECT run_id, iteration,
       {_pop_cols('entropy', 'entropy')},
       {_pop_cols('effective_entropy', 'eff_entropy')},
       max(value) FILTER (WHERE stage = 'evaluate' AND name = 'eval/accuracy') AS accuracy,
       map_from_entries(
           list({{'k': TRY_CAST(regexp_extract(name, '@([0-9]+)$', 1) AS INTEGER), 'v': value}}
                ORDER BY TRY_CAST(regexp_extract(name, '@([0-9]+)$', 1) AS INTEGER))
           FILTER (WHERE stage = 'evaluate' AND starts_with(name, 'eval/pass@'))
       ) AS pass_at_k
FROM metrics
WHERE starts_with(name, 'actor/entropy/') OR starts_with(name, 'actor/effective_entropy/')
   OR (stage = 'evaluate' AND (name = 'eval/accuracy' OR starts_with(name, 'eval/pass@')))
GROUP BY run_id, iteration
ORDER BY run_id, iteration
"""

_CLIP_FRACTION = """
WITH m AS (
    SELECT run_id, iteration, split_part(name, '/', 2) AS metric, split_part(name, '/', 3) AS population, value
    FROM metrics
    WHERE starts_with(name, 'actor/pg_clipfrac/') OR starts_with(name, 'actor/pg_clipfrac_adv/')
       OR starts_with(name, 'actor/ratio_above_frac/') OR starts_with(name, 'actor/ratio_max/')
)
SELECT run_id, iteration, population,
       max(value) FILTER (WHERE metric = 'pg_clipfrac') AS clipfrac,
       max(value) FILTER (WHERE metric = 'pg_clipfrac_adv') AS clipfrac_adv,
       max(value) FILTER (WHERE metric = 'ratio_above_frac') AS ratio_above_frac,
       max(value) FILTER (WHERE metric = 'ratio_max') AS ratio_max
FROM m
GROUP BY run_id, iteration, population
ORDER BY run_id,
         CASE population WHEN 'on_policy' THEN 0 WHEN 'continuation' THEN 1 WHEN 'prefix' THEN 2 WHEN 'all' THEN 3 ELSE 4 END,
         population, iteration
"""

_RUNS = """
WITH ids AS (
    SELECT run_id FROM configs UNION SELECT DISTINCT run_id FROM metrics
),
m AS (
    SELECT run_id,
           count(DISTINCT iteration) FILTER (WHERE stage = 'update') AS iterations_done,
           max(iteration) FILTER (WHERE stage = 'evaluate' AND name = 'eval/accuracy') AS last_eval_step,
           arg_max(value, iteration) FILTER (WHERE stage = 'evaluate' AND name = 'eval/accuracy') AS last_accuracy,
           max(value) FILTER (WHERE stage = 'evaluate' AND name = 'eval/accuracy') AS best_accuracy
    FROM metrics GROUP BY run_id
),
p AS (SELECT run_id, count(*) AS prefixes FROM prefixes GROUP BY run_id),
r AS (SELECT run_id, count(*) AS rollouts FROM rollouts GROUP BY run_id),
c AS (SELECT run_id, count(*) AS pool_checkpoints FROM checkpoints GROUP BY run_id)
SELECT ids.run_id, configs.algorithm, configs.iterations,
       coalesce(m.iterations_done, 0) AS iterations_done,
       m.last_eval_step, m.last_accuracy, m.best_accuracy,
       coalesce(p.prefixes, 0) AS prefixes, coalesce(r.rollouts, 0) AS rollouts,
       coalesce(c.pool_checkpoints, 0) AS pool_checkpoints,
       configs.created_at
FROM ids
LEFT JOIN configs USING (run_id) LEFT JOIN m USING (run_id) LEFT JOIN p USING (run_id)
LEFT JOIN r USING (run_id) LEFT JOIN c USING (run_id)
ORDER BY configs.created_at NULLS LAST, ids.run_id
"""

NAMED_QUERIES: dict[str, tuple[str, str]] = {
    "runs": (
        "One row per run: algorithm, iterations configured / done, last and best held-out accuracy "
        "(eval/accuracy at the last evaluated policy step), rows in the corpus and rollouts, pool size, created.",
        _RUNS,
    ),
    "prefix_diversity": (
        "Prefix corpus diversity: distinct character 3-grams / all 3-grams of prefix_text, by seed "
        "checkpoint age (source_age, 'dataset' for data-set guidance), by prefix length bucket "
        "(tokens: 0, 1, 2-3, 4-7, ...) and over the whole run ('all').",
        _PREFIX_DIVERSITY,
    ),
    "seeded_solve_rate": (
        "Solve rate (status = 'ok') and mean reward of seeded and offpolicy_full samples by seed "
        "source step, source age (iteration - source_step) and prefix length bucket, next to the "
        "on-policy solve rate of the same iterations (weighted like the group's samples) and the difference.",
        _SEEDED_SOLVE_RATE,
    ),
    "entropy_accuracy": (
        "Per run and iteration k (= policy step θ_k): actor/entropy and actor/effective_entropy by "
        "population, measured by update k on θ_k, next to eval/accuracy and eval/pass@k of θ_k "
        "(pass_at_k maps k to pass@k).",
        _ENTROPY_ACCURACY,
    ),
    "clip_fraction": (
        "Gradient lost to clipping by population over iterations: actor/pg_clipfrac (tokens), "
        "actor/pg_clipfrac_adv (|A|-weighted), share of ratios above 1+ε_high, max ratio.",
        _CLIP_FRACTION,
    ),
}


def view_columns() -> dict[str, list[str]]:
    """{view: [column, ...]} of the public views, as `connect()` creates them (files may add columns)."""
    out = {view: list(schema.names) for view, (_, schema) in _PARQUET_VIEWS.items()}
    out["prefixes"].append("prefix_len")
    out["checkpoints"] = list(CHECKPOINTS_SCHEMA.names)
    out["configs"] = list(CONFIGS_SCHEMA.names)
    return out
