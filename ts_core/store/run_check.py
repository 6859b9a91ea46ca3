"""`ts check`: verify a whole run directory without changing it, one line per problem."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from thinking_seeds.store.run_dir import RunDir

__all__ = ["check_run"]


def check_run(run: RunDir) -> tuple[list[str], list[str]]:
    """Verify a whole run directory: (damage, notes), one line each.

    Damage: a torn or unreadable manifest, an output a manifest names that is missing or no longer
    hashes as recorded, any policy step or pool snapshot whose files do not match its own manifest.
    Each line says which stage of which iteration to redo (resume does exactly that). Notes: temp
    files a killed writer left (removed when the run is next started) and the state of the lock.
    Reads only; hashes every file.
    """
    damage: list[str] = []
    seen: set[Path] = set()
    redo = f"re-run `ts train --run-id {run.run_id}` with its preset and --set values to redo"
    if not run.config_path.is_file():
        damage.append(
            f"{run.config_path} is missing: this is not a complete run directory; start it again with `ts train`"
        )
    for path in sorted(run.root.glob("manifests/iteration=*/*.json"), key=lambda p: (_iter_of(p), p.name)):
        if path.stem.endswith("_metrics"):
            continue  # the accelerate launcher's hand-over file, not a stage manifest
        k, stage = _iter_of(path), path.stem
        m = run.read_manifest(k, stage)
        where = f"{stage} of iteration {k}" if stage != "prepare" else "prepare"
        if m is None:
            damage.append(f"{path} is torn or unreadable: {redo} {where}")
            continue
        for name, rel in sorted(m.outputs.items()):
            p = run.root / rel
            seen.add(p)
            problem = _output_problem(run, p, m.hashes.get(name))
            if problem:
                damage.append(f"{p} {problem}: {redo} {where}")
    for root in (run.policy_root, run.pool_root):
        for d in sorted(root.glob("step_*")) if root.is_dir() else []:
            if d not in seen:
                problem = _output_problem(run, d, None)
                if problem:
                    damage.append(f"{d} {problem}: {redo} the stage that wrote it")
    notes = [f"{p} was left by a killed writer (removed when the run is next started)" for p in run.stale_temps()]
    notes.append(f"lock: {run.lock_state()}")
    return damage, notes


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
    if expected is not None and run.file_hash(p) != expected:
        return "no longer hashes as its stage manifest recorded"
    return None
