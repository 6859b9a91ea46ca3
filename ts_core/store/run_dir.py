"""The run directory: where every stage reads its inputs and writes its outputs (docs/algorithm.md §6).

    runs/<run_id>/
      config.yaml                       the validated config of the run
      data/{train,validation,test}.parquet
      policy/step_XXXXXX/               θ_k with optimizer state, every checkpoint.every steps (update stage)
      checkpoints/step_XXXXXX/          the historical pool's snapshots (weights only)
      corpus/prefixes/iteration=K/prefixes.parquet
      rollouts/iteration=K/{generated,rollouts}.parquet
      metrics/iteration=K/<stage>.parquet        long format: run_id, iteration, stage, name, value
      manifests/iteration=K/<stage>.json         what a completed stage wrote (paths, rows, hashes)
      reports/
      .lock                                       pid of the live process that owns the run

A stage is done when its manifest exists and the files it names still hash as recorded; that is
what makes `ts train --run-id X` resumable after a crash or `kill -9`.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa

from thinking_seeds.store import run_lock
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.child_guard import guard_children
from thinking_seeds.store.compacted_parts import COMPACTED
from thinking_seeds.store.contained import RUN_FOLDERS, OutsideRunError, bounded_hash, inside, read_small
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.parquet_io import DataError, write_table_atomic
from thinking_seeds.store.run_check import check_run
from thinking_seeds.store.run_lock import RunLockedError

# What callers import from here: the run directory is the store's front door.
__all__ = [
    "Manifest",
    "OutsideRunError",
    "RunDir",
    "RunLockedError",
    "check_run",
    "check_run_id",
    "guard_children",
    "run_entry",
    "runs_root",
]

RUNS_ROOT_ENV = "TS_RUNS_DIR"


def runs_root() -> Path:
    """The folder of run directories: --runs-dir, TS_RUNS_DIR, or ./runs; DataError (one line) if it names a file."""
    root = Path(os.environ.get(RUNS_ROOT_ENV, "runs")).resolve()
    if root.exists() and not root.is_dir():
        raise DataError(f"--runs-dir / {RUNS_ROOT_ENV} {root} is a file, not a folder; name a folder (made if missing)")
    return root


MAX_RUN_ID_BYTES = 200  # a folder name; file systems stop at 255


def check_run_id(run_id: str) -> None:
    """Refuse a run id that is not a usable folder name, in one line, before anything is written."""
    if not isinstance(run_id, str) or not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
        raise ValueError(f"run id {run_id!r} must be a plain name (letters, digits, - and _)")
    if run_id.startswith("-"):  # the commands printed for it (`ts eval -x`) would read as options
        raise ValueError(f"run id {run_id!r} must not start with '-': start it with a letter or digit")
    if any(not c.isprintable() or c.isspace() for c in run_id):
        raise ValueError(
            f"run id {run_id!r} must be a plain name (letters, digits, - and _): no spaces or control characters"
        )
    if len(run_id.encode()) > MAX_RUN_ID_BYTES:
        raise ValueError(
            f"run id {run_id[:40]!r}... is {len(run_id.encode())} bytes long; use at most {MAX_RUN_ID_BYTES}"
        )


def run_entry(base: Path, run_id: str) -> Path:
    """`base / run_id`, or OutsideRunError (one line) when that entry is a link that leads out of `base`:
    a run copied in as a link to elsewhere would have its temp sweep, resume and lock act there."""
    entry = Path(base) / run_id
    if entry.is_symlink():
        real, real_base = os.path.realpath(entry), os.path.realpath(base)
        if not real.startswith(real_base.rstrip(os.sep) + os.sep):
            raise OutsideRunError(
                f"run {run_id!r} under {base} is a link to {real}, outside the runs folder; it is not followed: "
                f"copy the run into {base} (or point --runs-dir / {RUNS_ROOT_ENV} at the folder it is in)"
            )
    return entry


@dataclass
class RunDir:
    root: Path

    @classmethod
    def for_run(cls, run_id: str, base: Path | None = None) -> RunDir:
        check_run_id(run_id)
        return cls(run_entry(base or runs_root(), run_id))

    def inside(self, path: str | os.PathLike[str]) -> Path:
        """`root / path` if it, links resolved, lies in this run; else OutsideRunError (store/contained.py)."""
        return inside(self.root, path)

    def check_contained(self) -> None:
        """OutsideRunError (one line) if the run's folder or one of its own folders is a link out of it."""
        run_entry(self.root.parent, self.root.name)
        for name in RUN_FOLDERS:
            if (self.root / name).is_symlink():
                self.inside(name)

    @property
    def run_id(self) -> str:
        return self.root.name

    # -- paths -------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def policy_root(self) -> Path:
        return self.root / "policy"

    @property
    def pool_root(self) -> Path:
        return self.root / "checkpoints"

    def policy(self, step: int) -> Path:
        return self.policy_root / f"step_{step:06d}"

    def prefixes(self, k: int) -> Path:
        return self.root / "corpus" / "prefixes" / f"iteration={k}" / "prefixes.parquet"

    def generated(self, k: int) -> Path:
        return self.root / "rollouts" / f"iteration={k}" / "generated.parquet"

    def rollouts(self, k: int) -> Path:
        return self.root / "rollouts" / f"iteration={k}" / "rollouts.parquet"

    def metrics(self, k: int, stage: str) -> Path:
        return self.root / "metrics" / f"iteration={k}" / f"{stage}.parquet"

    def manifest_path(self, k: int, stage: str) -> Path:
        return self.root / "manifests" / f"iteration={k}" / f"{stage}.json"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    def rel(self, p: Path) -> str:
        return str(Path(p).resolve().relative_to(self.root.resolve()))

    # -- manifests ---------------------------------------------------------------------------
    def write_manifest(self, m: Manifest) -> None:
        atomic_write(self.manifest_path(m.iteration, m.stage), json.dumps(asdict(m), indent=2, sort_keys=True))

    def read_manifest(self, k: int, stage: str) -> Manifest | None:
        path = self.manifest_path(k, stage)
        if not path.exists():
            return None
        try:  # a link, a FIFO or a huge file is not read: as a torn one, the stage is redone (and it replaced)
            return Manifest(**json.loads(read_small(path)))
        except (ValueError, TypeError, OSError):  # ValueError: JSON's error and DataError
            return None  # a torn manifest means the stage did not finish: redo it

    def completed(
        self, k: int, stage: str, config_hash: str, upstream: dict[str, str] | None = None
    ) -> Manifest | None:
        """The stage's manifest if it finished with this config, its outputs are intact and (when
        `upstream` is given) it was computed from inputs with exactly these digests."""
        m = self.read_manifest(k, stage)
        if m is None:
            return None
        intact = self._outputs_intact(m)  # first: a stage redone for any reason must not find damaged weights
        if m.config_hash != config_hash or (upstream is not None and m.upstream != upstream):
            return None
        return m if intact else None

    def _outputs_intact(self, m: Manifest) -> bool:
        """Whether every output of `m` exists and hashes as recorded; checks them all (so every
        damaged checkpoint is removed, see _intact_checkpoint) rather than stopping at the first."""
        ok = True
        from thinking_seeds.store.retention import is_pruned

        for name, rel in m.outputs.items():
            p = self.inside(rel)  # before anything is hashed, set aside or deleted through it
            if not p.exists():
                # checkpoint.keep_last removed it on purpose after it was complete: still done
                ok = is_pruned(p, m.hashes.get(name)) and ok
            elif p.is_dir():
                if not self._intact_checkpoint(p):
                    ok = False
                elif name in m.hashes and self.file_hash(p) != m.hashes[name]:
                    # whole in itself but not the checkpoint the stage wrote: the redone stage must
                    # write its own, not record this one (it only writes a checkpoint that is absent)
                    self._set_aside(p, "unrecorded")
                    ok = False
            elif name in m.hashes and self.file_hash(p) != m.hashes[name]:
                ok = False
        return ok

    def _intact_checkpoint(self, p: Path) -> bool:
        """Whether a checkpoint output still matches its own manifest, every file hashed (cached).

        A damaged one is removed when this process owns the run, so the stage that wrote it writes
        it again (the stages only create a checkpoint that is absent); a reader only reports it.
        """
        from thinking_seeds.store.checkpoints import CheckpointError, verified

        try:
            verified(p)
            return True
        except CheckpointError:
            self._set_aside(p, "damaged")
            return False

    def _set_aside(self, p: Path, why: str) -> None:
        """Remove checkpoint folder `p` if this process owns the run (a reader only reports it)."""
        if self.owns_lock():
            if p.is_symlink():
                raise OutsideRunError(f"{p} is a link, not a checkpoint of run {self.run_id}; it is not followed")
            self.inside(p)
            aside = p.with_name(f".old_{p.name}_{why}")
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(p, aside)  # atomic; a crash before the rmtree leaves a stale temp, cleaned on takeover
            shutil.rmtree(aside, ignore_errors=True)

    def config_problem(self) -> str | None:
        """Why this run's config.yaml is not the one its prepare stage recorded (one line), or None.

        A run directory is data until this holds: the commands that import what a config names (a
        reward function, trackers) check it first (docs/security.md)."""
        redo = f"`ts train --run-id {self.run_id}` with the run's preset and --set values writes it again"
        m = self.read_manifest(0, "prepare")
        recorded = m.hashes.get("config") if m is not None else None
        if not self.config_path.is_file():
            return f"{self.config_path} is missing: {redo}"
        if recorded is None:
            return (
                f"run {self.run_id} has no record of its config.yaml ({self.manifest_path(0, 'prepare')} is missing "
                f"or torn), so nothing vouches for it: {redo}"
            )
        if self.file_hash(self.config_path) != recorded:
            return f"{self.config_path} is damaged or was edited (it does not hash as the run recorded): {redo}"
        return None

    def check_config(self) -> None:
        """Raise DataError (one line) unless config.yaml is the one the run recorded (config_problem)."""
        problem = self.config_problem()
        if problem is not None:
            raise DataError(problem)

    def upstream_digests(self, deps: list[tuple[str, int]]) -> dict[str, str]:
        """{"stage@k": digest} of the manifests of `deps` ("missing" where a manifest is absent)."""
        out = {}
        for stage, k in deps:
            m = self.read_manifest(k, stage)
            out[f"{stage}@{k}"] = m.digest if m is not None else "missing"
        return out

    def file_hash(self, p: Path) -> str:
        """sha256 of a file of this run (of its manifest.json for a checkpoint folder): refused in one
        line when the path leads out of the run, is a special file, or is over TS_MAX_FILE_GB."""
        p = self.inside(p)
        if p.is_dir():
            p = self.inside(p / "manifest.json")
        if not p.exists():
            raise DataError(f"cannot hash {p}: file not found; `ts check {self.run_id}` lists what is missing")
        return bounded_hash(p, follow=True)  # a link that stays in the run is hashed as its target

    # -- metrics -----------------------------------------------------------------------------
    def write_metrics(self, k: int, stage: str, metrics: dict[str, float]) -> Path:
        names = sorted(metrics)
        table = pa.table(
            {
                "run_id": [self.run_id] * len(names),
                "iteration": pa.array([k] * len(names), pa.int64()),
                "stage": [stage] * len(names),
                "name": names,
                "value": pa.array([float(metrics[n]) for n in names], pa.float64()),
            }
        )
        return write_table_atomic(table, self.metrics(k, stage))

    # -- lock (thinking_seeds.store.run_lock) -----------------------------------------------------
    def acquire_lock(self) -> None:
        """Own the run directory, or raise RunLockedError naming the live owner (re-entrant).

        On taking a run over, what a killed writer left half-done (temp files and folders) is
        removed, and this process's children are made to die with it (guard_children).
        """
        self.check_contained()  # before the lock file is opened and temps are swept
        if run_lock.acquire(self.root):
            guard_children()  # the owner's helpers must not outlive it and keep the run busy
            self.remove_stale_temps()

    def release_lock(self) -> None:
        run_lock.release(self.root)

    def owns_lock(self) -> bool:
        """Whether this process holds the run's lock."""
        return run_lock.held(self.root)

    def lock_state(self) -> str:
        """'free', 'stale' (a file left by a dead owner) or 'held by PID' -- for `ts check`; takes nothing."""
        return run_lock.state(self.root)

    # -- what a killed writer leaves ----------------------------------------------------------
    def stale_temps(self) -> list[Path]:
        """Temp files (`*.tmp`) and folders (`.tmp_*`, `.old_*`) that writers of this run create and
        rename away; one still present belongs to a writer that was killed. Reports and compacted
        parts are left alone: `ts report` and `ts compact` write them without owning the run."""
        run_entry(self.root.parent, self.root.name)  # the walk below enters no link, but the run's own folder
        found: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(self.root):  # links to folders are listed, not entered
            here = Path(dirpath)
            # .prefect-results: Prefect's result store in runs from before the manifests were the only record
            if here in (self.reports, self.root / COMPACTED, self.root / ".prefect-results"):
                dirnames[:] = []
                continue
            for d in list(dirnames):
                if d.startswith((".tmp_", ".old_")):
                    found.append(here / d)
                    dirnames.remove(d)
            found += [here / f for f in filenames if f.endswith(".tmp") or f.startswith(".tmp_")]
        return sorted(found)

    def remove_stale_temps(self) -> list[Path]:
        """Remove stale_temps(); only the run's owner may call it (a live writer's temps are not stale)."""
        if not self.owns_lock():
            raise RunLockedError(f"remove_stale_temps needs the lock of {self.root}; call acquire_lock first")
        stale = self.stale_temps()
        for p in stale:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        return stale
