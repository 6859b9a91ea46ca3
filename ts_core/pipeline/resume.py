"""`ts train` on a run directory that exists: resume it, extend it, or refuse, in one line each.

A run's identity is the config it was started with: config.yaml, written once (its bytes are hashed
into the prepare manifest, which every stage's manifest chains to), and its config hash, recorded in
every manifest and in a comparison's archive. The same command resumes the run at its first stage
without a manifest. Raising `iterations` extends a finished or stopped run: the new end is recorded
beside config.yaml (config/loading.py EXTENSION_FILE) and the config keeps hashing as it started
(`RunConfig.started_iterations`), so every finished stage stays done -- the stage seeds do not read
`iterations` (graph.stage_seed) and the evaluation of the old end stays on disk. A setting whose
default changed since the run started (config/run_config.py DEFAULTS_BEFORE) keeps the run's value.
Any other change is refused, naming each key with its old and new value.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from thinking_seeds.config import EXTENSION_FILE, ConfigError, RunConfig, load_saved_config, save_config
from thinking_seeds.config.run_config import keep_defaults_before
from thinking_seeds.pipeline.graph import STAGES
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.parquet_io import content_hash
from thinking_seeds.store.run_dir import RunDir

__all__ = ["changed_settings", "continued_config", "record_extension", "restore_config", "resume_line"]

MAX_STARTED_ITERATIONS = 100_000  # how far restore_config looks for an extended run's first end


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def changed_settings(old: RunConfig, new: RunConfig) -> dict[str, tuple[Any, Any]]:
    """The hashed settings whose values differ: dotted key -> (old value, new value)."""
    a, b = _flat(old.hashed_settings()), _flat(new.hashed_settings())
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def continued_config(run: RunDir, cfg: RunConfig) -> RunConfig:
    """`cfg` as run `run` continues with it: itself for a new run, the run's identity kept
    (`started_iterations`) for an existing one; ValueError (one line) for a config the run did not start with."""
    restore_config(run, cfg)
    if not run.config_path.is_file():
        return cfg
    saved = saved_config(run)  # iterations: the run's current end
    cfg = keep_defaults_before(saved, cfg)  # a run started before a default changed keeps its value
    changed = changed_settings(saved, cfg)
    started = saved.started_iterations
    if set(changed) == {"iterations"} and cfg.iterations > saved.iterations:
        started = started or saved.iterations  # extend it
    elif changed:
        shown = "; ".join(f"{k} {_show(a)} -> {_show(b)}" for k, (a, b) in changed.items())
        hint = (
            f"a run is extended, never shortened: pass --set iterations={saved.iterations} (or more)"
            if set(changed) == {"iterations"}
            else "resume it with the same preset and --set values (raising iterations extends it)"
        )
        raise ValueError(
            f"run {run.run_id} ({run.root}) was started with another config: {shown}; {hint}, or choose a new --run-id"
        )
    return cfg.model_copy(update={"started_iterations": started})


def saved_config(run: RunDir) -> RunConfig:
    """The run's config.yaml (nothing it names imported); ConfigError saying the file is damaged when it
    does not read as a config."""
    try:
        return load_saved_config(run.config_path, check_outside=False)
    except ConfigError as e:
        why = " ".join(str(e).split())
        raise ConfigError(
            f"{run.config_path} is damaged ({why[:300]}); `ts train --run-id {run.run_id}` with the run's preset "
            "and --set values writes it again, or restore it from a copy of the run"
        ) from None


def restore_config(run: RunDir, cfg: RunConfig) -> bool:
    """Write config.yaml again when it is missing or no longer hashes as the run's prepare manifest
    recorded, from `cfg` (the preset and --set values the run is resumed with) -- only if that gives
    exactly the recorded bytes; else ConfigError in one line. True when it was written. An extended
    run's config.yaml holds its first end: found as the `iterations` whose config hash the run has."""
    m = run.read_manifest(0, "prepare")
    recorded = m.hashes.get("config") if m is not None else None
    if recorded is None or (run.config_path.is_file() and run.file_hash(run.config_path) == recorded):
        return False
    first = cfg.started_iterations or cfg.iterations
    candidates = [first] if cfg.config_hash() == m.config_hash else []
    if not candidates:  # extended since it started: the first end is a smaller iterations with the run's hash
        for i in range(1, min(cfg.iterations, MAX_STARTED_ITERATIONS)):
            if cfg.model_copy(update={"iterations": i, "started_iterations": None}).config_hash() == m.config_hash:
                candidates = [i]
                break
    for i in candidates:
        started = cfg.model_copy(update={"iterations": i, "started_iterations": None})
        fd, name = tempfile.mkstemp(prefix=".tmp_config_", dir=run.root)  # a stale temp if killed: cleaned
        os.close(fd)
        tmp = Path(name)
        try:
            save_config(started, tmp)
            if content_hash(tmp) == recorded:
                os.replace(tmp, run.config_path)
                return True
        finally:
            tmp.unlink(missing_ok=True)
    state = "is missing" if not run.config_path.is_file() else "is damaged or was edited (it does not hash as recorded)"
    raise ConfigError(
        f"{run.config_path} {state}, and this preset and --set values do not write the run's own again; pass "
        f"the ones run {run.run_id} was started with, or restore config.yaml from a copy of the run"
    )


def _show(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (str, list, dict)) or v is None else str(v)


def record_extension(run: RunDir, cfg: RunConfig) -> None:
    """Write the run's new end beside its config.yaml when `cfg` extends it (its lock held)."""
    if cfg.started_iterations is None or not run.config_path.is_file():
        return
    if saved_config(run).iterations != cfg.iterations:
        atomic_write(run.root / EXTENSION_FILE, json.dumps({"iterations": cfg.iterations}) + "\n")


def _order(iterations: int) -> Iterator[tuple[int, str]]:
    """The run's stages in the order they run: prepare, the evaluation of θ_0, then each iteration's."""
    yield 0, "prepare"
    yield -1, "evaluate"
    for k in range(iterations):
        for s in STAGES:
            yield k, s


def _done_stages(run: RunDir, iterations: int, config_hash: str) -> set[tuple[int, str]]:
    """The (iteration, stage) pairs with a manifest of this config: read from the iterations that have a
    manifest folder, so the cost follows the run's progress, not its `iterations`."""
    done = set()
    for folder in run.manifest_path(0, "prepare").parent.parent.glob("iteration=*"):
        tail = folder.name.removeprefix("iteration=")
        if not tail.lstrip("-").isdigit() or int(tail) >= iterations:
            continue
        k = int(tail)
        stages = ("evaluate",) if k == -1 else (("prepare",) if k == 0 else ()) + STAGES
        for s in stages:
            if (m := run.read_manifest(k, s)) is not None and m.config_hash == config_hash:
                done.add((k, s))
    return done


def resume_line(run: RunDir, cfg: RunConfig) -> str | None:
    """One line for a run that has finished stages ("resuming demo: 47 stages done, continuing at
    iteration 6 (continuation)"); None for a new run. Counts manifests of this config (reads no output)."""
    done = _done_stages(run, cfg.iterations, cfg.config_hash())
    if not done:
        return None
    before = saved_config(run).iterations if run.config_path.is_file() else 0
    head = f"resuming {run.run_id}"
    if 0 < before < cfg.iterations:
        head = f"extending {run.run_id} from {before} to {cfg.iterations} iterations"
    first = next((x for x in _order(cfg.iterations) if x not in done), None)  # lazy: stops at the first gap
    if first is None:
        return (
            f"run {run.run_id} is complete ({len(done)} stages, {cfg.iterations} iterations): checking its files "
            "(a stage whose files are damaged is redone)"
        )
    k, s = first
    at = f"iteration {k} ({s})" if k >= 0 else "the evaluation of θ_0"
    return f"{head}: {len(done)} stage{'s' if len(done) != 1 else ''} done, continuing at {at}"
