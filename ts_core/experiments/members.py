"""The runs of a comparison on disk: their markers, which are complete, how long they trained.

    write_marker(runs / run_id, spec.marker())      # <run>/compare.json: compare id, method, seed, sweep point
    compare_members("cmp", runs)                     # [marker, ...] of every run directory of comparison cmp
    is_complete(spec, runs)                          # trained to the last iteration with this config
    train_seconds(["cmp-grpo-s0"], runs)             # {run_id: seconds of training, evaluation left out}

A run directory may also be a copy restored from a comparison's committed archive (archive.py): it
holds an `archive.json` record instead of checkpoints and manifests, and counts as complete when the
config hash recorded there is the planned config's. Never imports prefect.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError
from thinking_seeds.experiments.comparison_args import value_text
from thinking_seeds.experiments.recorded_defaults import RunRecords, with_recorded_defaults
from thinking_seeds.experiments.run_spec import (
    CONTROL_METHOD,
    MARKER,
    RunSpec,
    check_same_budget,
    compute_matched,
    dotted,
    spec_of,
    training_seconds_sql,
)
from thinking_seeds.store.atomic import atomic_write

__all__ = [
    "ARCHIVE_FILE",
    "archive_record",
    "base_point_variant",
    "compare_members",
    "discard_restored",
    "is_complete",
    "read_json",
    "reference_members",
    "train_seconds",
    "write_marker",
]

ARCHIVE_FILE = "archive.json"  # in an archived run (and its restored copy): what was archived, from which config


def read_json(path: Path) -> Any:
    """The JSON at `path`, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def archive_record(run_root: Path) -> dict[str, Any] | None:
    """The `archive.json` of an archived run or of its restored copy; None for a run trained here."""
    return read_json(Path(run_root) / ARCHIVE_FILE)


def discard_restored(run_root: Path) -> None:
    """Remove a copy restored from the archive (this code's own copy of archived files) before its
    run trains again; a run directory without archive.json (trained here) is refused."""
    if archive_record(run_root) is None:
        raise ConfigError(f"{run_root} is not a copy restored from an archive (no {ARCHIVE_FILE}); not removing it")
    shutil.rmtree(run_root)


def write_marker(run_root: Path, marker: dict[str, Any]) -> Path:
    """Write `<run>/compare.json` atomically (unchanged content is not rewritten)."""
    run_root.mkdir(parents=True, exist_ok=True)
    path = run_root / MARKER
    text = json.dumps(marker, indent=2, sort_keys=True)
    old = read_json(path)
    if old is not None and old.get("compare_id") != marker.get("compare_id"):
        raise ConfigError(
            f"{run_root} belongs to comparison {old.get('compare_id')!r}, "
            f"not {marker.get('compare_id')!r}; choose another --id"
        )
    if old == json.loads(text):
        return path
    return atomic_write(path, text)  # the marker follows the umask like every run file


def compare_members(compare_id: str, runs_dir: Path) -> list[dict[str, Any]]:
    """The markers of every run directory under `runs_dir` that belongs to `compare_id`."""
    out = []
    base = Path(runs_dir)
    if not base.is_dir():
        return out
    for d in sorted(base.iterdir()):
        path = d / MARKER
        if d.name.startswith(".") or not path.is_file():  # a run id never starts with "." (temp folders do)
            continue
        m = read_json(path)
        if m is not None and m.get("compare_id") == compare_id:
            m["run_id"] = d.name
            out.append(m)
    return out


def reference_members(reference_id: str, specs: Sequence[RunSpec], runs_dir: Path) -> list[dict[str, Any]]:
    """The unswept runs of comparison `reference_id` that an ablation `specs` is measured against.

    An ablation varies method settings around a base configuration that an earlier comparison
    already ran (e.g. `thinking_seeds` of the main comparison, seeds 0-2). Rather than training the
    base point again, the ablation's report includes those runs: same methods, same seeds, no sweep
    point, complete, and on the same budget (BUDGET_KEYS) as every run of `specs`. Each returned
    marker gets `reference` (the id) and a `variant` naming the base values of the swept keys.
    Raises ConfigError when the reference has no such run or its budget differs.
    """
    specs = [s for s in specs if s.method != CONTROL_METHOD]
    methods = {s.method for s in specs}
    seeds = {s.seed for s in specs}
    keys = list(dict.fromkeys(k for s in specs for k, _ in s.sweep))
    found = [
        m
        for m in compare_members(reference_id, runs_dir)
        if m.get("method") in methods and m.get("seed") in seeds and not m.get("sweep")
    ]
    if not found:
        raise ConfigError(
            f"--reference {reference_id}: no run of that comparison under {runs_dir} has method "
            f"{'/'.join(sorted(methods))}, seed {'/'.join(map(str, sorted(seeds)))} and no sweep point; "
            f"run `ts compare --id {reference_id} ...` first or drop --reference"
        )
    configs = {s.run_id: s.config() for s in specs}
    records = RunRecords(runs_dir, None)  # a reference run recorded before a default changed keeps it
    out = []
    for m in found:
        (ref,) = with_recorded_defaults([spec_of(m)], runs_dir, None, records)
        if not is_complete(ref, runs_dir):
            raise ConfigError(
                f"--reference {reference_id}: run {ref.run_id} is not complete; finish it with "
                f"`ts compare --id {reference_id} ...` (same command) first"
            )
        cfg = ref.config()
        configs[ref.run_id] = cfg
        d = cfg.model_dump(mode="json")
        base = " ".join(f"{k}={value_text(dotted(d, k))}" for k in keys)
        out.append(
            {
                **m,
                "reference": reference_id,
                "variant": f"{m['method']} {base} [{reference_id}]" if base else f"{m['method']} [{reference_id}]",
            }
        )
    check_same_budget(configs, compute_matched(specs))
    return out


def base_point_variant(members: Sequence[dict[str, Any]]) -> str | None:
    """The variant of a sweep that sets every swept key to the value its run would have without the
    sweep (e.g. `advantage.baseline=group` in `--sweep advantage.baseline=group,same_seed`), or None.

    A sweep that includes its own base point needs no --reference: the report pairs the other
    points against it. Controls and unswept runs are not candidates.
    """
    found = []
    for m in members:
        if not m.get("sweep") or m.get("method") == CONTROL_METHOD or m.get("reference"):
            continue
        spec = spec_of(m)
        d = replace(spec, sweep=()).config().model_dump(mode="json")
        if all(value_text(dotted(d, k)) == v for k, v in spec.sweep):
            found.append(m["variant"])
    variants = set(found)
    return found[0] if len(variants) == 1 else None  # two methods each with a base point: no single baseline


def is_complete(spec: RunSpec, runs_dir: Path) -> bool:
    """True when the run's last iteration (update and evaluate) finished with this config (or it is a
    copy restored from the archive of a run that did)."""
    from thinking_seeds.store.run_dir import RunDir

    cfg = spec.config()
    run = RunDir.for_run(spec.run_id, runs_dir)
    h = cfg.config_hash()
    record = archive_record(run.root)
    if record is not None:  # restored from the archive: no manifests, the recorded hash says it
        return record.get("config_hash") == h
    k = cfg.iterations - 1
    return all(run.completed(k, stage, h) is not None for stage in ("update", "evaluate"))


def train_seconds(run_ids: Sequence[str], runs_dir: Path) -> dict[str, float]:
    """Training wall time per run: its stages' `time/*` metrics, evaluation and seeds sampled
    beside the update left out (`training_seconds_sql`).

    Evaluation is the same for every method (and for the SFT control), so the budget compared is
    the time spent producing the policy. Runs without timings are absent from the result.
    """
    if not run_ids:
        return {}
    from thinking_seeds.store.sql import connect, query
    from thinking_seeds.store.sql_files import literals

    con = connect(runs_dir=runs_dir)
    try:
        res = query(con, training_seconds_sql(f"(SELECT * FROM metrics WHERE run_id IN ({literals(run_ids)}))"))
    finally:
        con.close()
    return {r: float(s) for r, s in res.rows}
