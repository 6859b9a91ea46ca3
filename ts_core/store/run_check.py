"""`ts check`: verify a whole run directory without changing it, one line per problem."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from thinking_seeds.store.contained import RUN_FOLDERS, OutsideRunError, link_out
from thinking_seeds.store.parquet_io import DataError

if TYPE_CHECKING:
    from thinking_seeds.store.run_dir import RunDir

__all__ = ["check_run"]


def check_run(run: RunDir, policy_ids: Callable[[int], str] | None = None) -> tuple[list[str], list[str]]:
    """Verify a whole run directory: (damage, notes), one line each.

    Damage: a torn or unreadable manifest, an output a manifest names that is missing or no longer
    hashes as recorded, a manifest whose inputs' records changed since it was written (an edited
    manifest upstream), any policy step or pool snapshot whose files do not match its own manifest, a
    config.yaml that does not read as YAML sections.
    Each line says the command that repairs it (resume redoes exactly that stage; prepare writes
    config.yaml and a generated split again, or copies a user's split again from its file) or what
    to restore. Notes: temp files a killed writer left (removed when the run is next started) and
    the state of the lock. Reads only; hashes every file.

    `policy_ids(step)`: θ_step's identity from the current manifests (pipeline/policy_chain.py
    policy_id); with it, a checkpoint an update wrote in the background (its manifest records no hash)
    must carry that identity.
    """
    damage: list[str] = []
    seen: set[Path] = set()
    train = f"`ts train --run-id {run.run_id}` with the run's preset and --set values"
    redo = f"re-run {train} to redo"
    if not run.config_path.is_file():
        if run.read_manifest(0, "prepare") is not None:
            damage.append(f"{run.config_path} is missing: {train} writes it again")
        else:
            damage.append(
                f"{run.config_path} is missing: this is not a complete run directory; start it again with `ts train`"
            )
    elif (config_problem := _config_problem(run.config_path)) is not None:
        # with no manifest recording its hash nothing else reads it (`ts check` called such a run intact)
        fix = (
            f"{train} writes it again"
            if run.read_manifest(0, "prepare") is not None
            else "restore it from a copy of the run, or start the run again with `ts train`"
        )
        damage.append(f"{run.config_path} {config_problem}: {fix}")
    ext = run.root / "extension.json"  # config/loading.py EXTENSION_FILE: an extended run's end
    if ext.is_file() and _extension_end(ext) is None:
        damage.append(
            f'{ext} is damaged (it should read {{"iterations": N}}): delete it and run `ts train --run-id '
            f"{run.run_id}` with the run's preset and --set values and --set iterations=N, the end it was extended to"
        )
    paths = sorted(run.root.glob("manifests/iteration=*/*.json"), key=lambda p: (_iter_of(p), p.name))
    # the accelerate launcher's hand-over files (*_metrics) are not stage manifests
    manifests = [(p, _iter_of(p), p.stem) for p in paths if not p.stem.endswith("_metrics")]
    read = {(k, stage): run.read_manifest(k, stage) for _, k, stage in manifests}
    if any(m is None for m in read.values()):
        policy_ids = None  # a policy's identity chains through every manifest: a torn one changes them all
    for path, k, stage in manifests:
        m = read[(k, stage)]
        where = f"{stage} of iteration {k}" if stage != "prepare" else "prepare"
        if m is None:
            damage.append(f"{path} is torn or unreadable: {redo} {where}")
            continue
        for name, rel in sorted(m.outputs.items()):
            p = run.root / rel
            seen.add(p)
            if (out := link_out(run.root, rel)) is not None:  # never hashed, never advised to resume
                damage.append(f"{path}: {out}")
                continue
            try:
                problem = _output_problem(run, p, m.hashes.get(name))
            except OutsideRunError as e:  # a checkpoint's own manifest names a file out of it
                damage.append(f"{p}: {e}")
                continue
            if problem is None and stage == "update" and name not in m.hashes and policy_ids is not None:
                problem = _identity_problem(p, policy_ids(k + 1))
            if problem:
                damage.append(f"{p} {problem}: {_repair(run, stage, name, train, redo, where)}")
        for key, digest in sorted(m.upstream.items()):
            up_stage, _, up_k = key.rpartition("@")
            up = run.read_manifest(int(up_k), up_stage) if up_k.lstrip("-").isdigit() else None
            now = up.digest if up is not None else "missing"
            torn = up is None and up_k.lstrip("-").isdigit() and run.manifest_path(int(up_k), up_stage).exists()
            if now != digest and not torn:  # a torn one is named on its own
                damage.append(f"{path} was computed from inputs whose record ({key}) has changed since: {redo} {where}")
    for folder in RUN_FOLDERS:
        if (out := link_out(run.root, folder)) is not None:
            damage.append(out)
    for root in (run.policy_root, run.pool_root):
        if link_out(run.root, root.name) is not None:
            continue
        for d in sorted(root.glob("step_*")) if root.is_dir() else []:
            if (out := link_out(run.root, d)) is not None:
                damage.append(out)
            elif d not in seen:
                try:
                    problem = _output_problem(run, d, None)
                except OutsideRunError as e:
                    damage.append(f"{d}: {e}")
                    continue
                if problem:
                    damage.append(f"{d} {problem}: {redo} the stage that wrote it")
    notes = [f"{p} was left by a killed writer (removed when the run is next started)" for p in run.stale_temps()]
    lock = run.lock_state()
    if lock.startswith("refused: "):
        damage.append(lock.removeprefix("refused: "))
    notes.append(f"lock: {lock}")
    return damage, notes


def _identity_problem(p: Path, expected: str) -> str | None:
    """Why a checkpoint whose update recorded no hash is not the θ that update computed, or None."""
    if not p.is_dir():
        return None  # pruned (checkpoint.keep_last) or still being written
    try:
        found = json.loads((p / "manifest.json").read_text()).get("extra", {}).get("policy_id")
    except (OSError, ValueError, AttributeError):
        return "is damaged (its manifest.json does not read)"
    if found != expected:
        return f"is not the policy its update computed (policy id {found!r}, expected {expected!r})"
    return None


def _repair(run: RunDir, stage: str, name: str, train: str, redo: str, where: str) -> str:
    """The command that repairs one damaged output, in words."""
    if stage != "prepare":
        return f"{redo} {where}"
    if name == "config":
        return f"{train} writes it again"
    if name == "policy":
        return f"{train} copies θ_0 again from the base model"
    user_file = {"train": "data.train_path", "validation": "data.val_path"}.get(name)
    if user_file and _data_source(run) == "parquet":
        return f"{train} copies it again from {user_file} if that file is unchanged (else restore that file)"
    return f"{train} builds this split again from the data source"


def _extension_end(ext: Path) -> int | None:
    try:
        end = json.loads(ext.read_text())["iterations"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return end if isinstance(end, int) and not isinstance(end, bool) and end >= 1 else None


def _config_problem(path: Path) -> str | None:
    """Why config.yaml does not read as a config's sections (one phrase), or None."""
    import yaml

    from thinking_seeds.yaml_limits import YamlLimitError, read_bounded

    try:
        data = read_bounded(path)
    except OSError as e:
        return f"is unreadable ({e.strerror})"
    except YamlLimitError as e:  # over the limits, or not UTF-8 text
        return f"is damaged (it {e})"
    except yaml.YAMLError as e:
        return f"is damaged: not valid YAML ({' '.join(str(e).split())[:200]})"
    if not isinstance(data, dict):
        return f"is damaged: it holds a {type(data).__name__}, not a mapping of config sections"
    return None


def _data_source(run: RunDir) -> str | None:
    """data.source of the run's config.yaml, read as plain data within the YAML limits (None: unreadable)."""
    from thinking_seeds.yaml_limits import read_bounded

    try:
        data = read_bounded(run.config_path).get("data", {})
        return data.get("source") if isinstance(data, dict) else None
    except Exception:  # noqa: BLE001 - a damaged config.yaml is reported on its own line
        return None


def _iter_of(path: Path) -> int:
    part = path.parent.name
    k = part.split("=", 1)[1] if part.startswith("iteration=") else ""
    return int(k) if k.lstrip("-").isdigit() else -1


def _output_problem(run: RunDir, p: Path, expected: str | None) -> str | None:
    """Why one output is damaged (missing, a checkpoint failing its own manifest, a changed hash), or None."""
    from thinking_seeds.store.checkpoints import CheckpointError, verified

    if not p.exists():
        return "is missing"
    if p.is_dir():
        try:
            verified(p)
        except CheckpointError as e:
            why = str(e).split(": re-run", 1)[0].split("; re-run", 1)[0].replace(f"checkpoint {p} ", "")
            return f"is damaged ({why})"
    if expected is not None:
        try:
            if run.file_hash(p) != expected:
                return "no longer hashes as its stage manifest recorded"
        except DataError as e:  # a FIFO, a device, a file over TS_MAX_FILE_GB: not read
            return f"is not read ({e})"
    return None
