"""The run directory: where every stage reads its inputs and writes its outputs (SPEC §6).

    runs/<run_id>/
      config.yaml                       the validated config of the run
      data/{train,validation,test}.parquet
      policy/step_XXXXXX/               θ_k with optimizer state (written by the update stage)
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
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from .parquet_io import content_hash, write_table_atomic

RUNS_ROOT_ENV = "TS_RUNS_DIR"


def runs_root() -> Path:
    return Path(os.environ.get(RUNS_ROOT_ENV, "runs")).resolve()


class RunLockedError(RuntimeError):
    """Another live process owns this run directory."""


@dataclass
class Manifest:
    """What a stage wrote: enough to check it later and to key the next stage's cache."""

    stage: str
    iteration: int
    config_hash: str
    outputs: dict[str, str] = field(default_factory=dict)  # name -> path relative to the run dir
    hashes: dict[str, str] = field(default_factory=dict)  # name -> sha256 of the file (or manifest)
    rows: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # timing breakdown of the stage
    upstream: dict[str, str] = field(default_factory=dict)  # "stage@k" -> digest of each input stage

    @property
    def digest(self) -> str:
        """One hash of this stage's data outputs and of its inputs' digests (a Merkle chain): the
        upstream part of the next stage's cache key. A change anywhere upstream changes every digest
        below it. The metrics file is left out: it holds timings, and no stage reads it."""
        import hashlib

        data = {k: v for k, v in self.hashes.items() if k != "metrics"}
        blob = json.dumps({"hashes": data, "upstream": self.upstream}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class RunDir:
    root: Path

    @classmethod
    def for_run(cls, run_id: str, base: Path | None = None) -> "RunDir":
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise ValueError(f"run id {run_id!r} must be a plain name (letters, digits, - and _)")
        return cls((base or runs_root()) / run_id)

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
        path = self.manifest_path(m.iteration, m.stage)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(m), indent=2, sort_keys=True))
        os.replace(tmp, path)

    def read_manifest(self, k: int, stage: str) -> Manifest | None:
        path = self.manifest_path(k, stage)
        if not path.exists():
            return None
        try:
            return Manifest(**json.loads(path.read_text()))
        except (json.JSONDecodeError, TypeError):
            return None  # a torn manifest means the stage did not finish: redo it

    def completed(self, k: int, stage: str, config_hash: str, upstream: dict[str, str] | None = None) -> Manifest | None:
        """The stage's manifest if it finished with this config, its outputs are intact and (when
        `upstream` is given) it was computed from inputs with exactly these digests."""
        m = self.read_manifest(k, stage)
        if m is None or m.config_hash != config_hash:
            return None
        if upstream is not None and m.upstream != upstream:
            return None
        for name, rel in m.outputs.items():
            p = self.root / rel
            if not p.exists():
                return None
            if name in m.hashes:
                if p.is_dir() and not (p / "manifest.json").is_file():
                    return None
                if self.file_hash(p) != m.hashes[name]:
                    return None
        return m

    def upstream_digests(self, deps: list[tuple[str, int]]) -> dict[str, str]:
        """{"stage@k": digest} of the manifests of `deps` ("missing" where a manifest is absent)."""
        out = {}
        for stage, k in deps:
            m = self.read_manifest(k, stage)
            out[f"{stage}@{k}"] = m.digest if m is not None else "missing"
        return out

    def file_hash(self, p: Path) -> str:
        p = Path(p)
        return content_hash(p / "manifest.json") if p.is_dir() else content_hash(p)

    # -- metrics -----------------------------------------------------------------------------
    def write_metrics(self, k: int, stage: str, metrics: dict[str, float]) -> Path:
        names = sorted(metrics)
        table = pa.table({
            "run_id": [self.run_id] * len(names),
            "iteration": pa.array([k] * len(names), pa.int64()),
            "stage": [stage] * len(names),
            "name": names,
            "value": pa.array([float(metrics[n]) for n in names], pa.float64()),
        })
        path = self.metrics(k, stage)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_table_atomic(table, path)

    # -- lock --------------------------------------------------------------------------------
    def acquire_lock(self) -> None:
        """Own the run directory; take over the lock of a dead process, refuse a live one's."""
        self.root.mkdir(parents=True, exist_ok=True)
        lock = self.root / ".lock"
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        while True:
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    owner = json.loads(lock.read_text() or "{}")
                except (OSError, json.JSONDecodeError):
                    owner = {}
                pid = owner.get("pid")
                if pid == os.getpid():
                    return
                if pid and owner.get("host") == me["host"] and _alive(pid):
                    raise RunLockedError(
                        f"run directory {self.root} is in use by live process {pid}; wait for it, stop it, "
                        f"or choose another --run-id"
                    )
                # Stale: the owner died (or the file is torn). Remove and retry atomically.
                try:
                    lock.unlink()
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            return

    def release_lock(self) -> None:
        lock = self.root / ".lock"
        try:
            if json.loads(lock.read_text()).get("pid") == os.getpid():
                lock.unlink()
        except (OSError, json.JSONDecodeError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (dead child not yet reaped) still answers kill(0); treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
