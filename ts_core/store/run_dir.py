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

import fcntl
import json
import os
import shutil
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from thinking_seeds.store.parquet_io import content_hash, write_table_atomic

RUNS_ROOT_ENV = "TS_RUNS_DIR"


def runs_root() -> Path:
    return Path(os.environ.get(RUNS_ROOT_ENV, "runs")).resolve()


class RunLockedError(RuntimeError):
    """Another live process owns this run directory."""


MAX_RUN_ID_BYTES = 200  # a folder name; file systems stop at 255


def check_run_id(run_id: str) -> None:
    """Refuse a run id that is not a usable folder name, in one line, before anything is written."""
    if not isinstance(run_id, str) or not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
        raise ValueError(f"run id {run_id!r} must be a plain name (letters, digits, - and _)")
    if any(not c.isprintable() or c.isspace() for c in run_id):
        raise ValueError(f"run id {run_id!r} must be a plain name (letters, digits, - and _): no spaces or control characters")
    if len(run_id.encode()) > MAX_RUN_ID_BYTES:
        raise ValueError(f"run id {run_id[:40]!r}... is {len(run_id.encode())} bytes long; use at most {MAX_RUN_ID_BYTES}")


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
        check_run_id(run_id)
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
            p = self.root / rel
            if not p.exists():
                # checkpoint.keep_last removed it on purpose after it was complete: still done
                ok = is_pruned(p, m.hashes.get(name)) and ok
            elif p.is_dir():
                ok = self._intact_checkpoint(p) and (name not in m.hashes or self.file_hash(p) == m.hashes[name]) and ok
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
            if self.owns_lock():
                aside = p.with_name(f".old_{p.name}_damaged")
                shutil.rmtree(aside, ignore_errors=True)
                os.replace(p, aside)  # atomic; a crash before the rmtree leaves a stale temp, cleaned on takeover
                shutil.rmtree(aside, ignore_errors=True)
            return False

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

    # -- lock ----------------------------------------------------------------------------------
    def acquire_lock(self) -> None:
        """Own the run directory, or raise RunLockedError naming the live owner.

        Ownership is an OS lock (flock) on an open descriptor of `.lock`: atomic, and it dies with
        the process that holds it (kill -9 included), so a stale lock needs no detection at all.
        The pid written into the file is for people, never the test of liveness: an empty or torn
        file just means its writer died before it finished. On taking a run over, what a killed
        writer left half-done (temp files and folders) is removed.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        lock = self.root / ".lock"
        key = str(lock.resolve())
        if key in _HELD:
            return  # re-entrant within one process (flow and tasks share it)
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)  # the umask applies; never executable
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(fd)
                os.close(fd)
                who = f"live process {owner['pid']}" if owner.get("pid") else "another live process"
                raise RunLockedError(
                    f"run directory {self.root} is in use by {who}; wait for it, stop it, or choose another --run-id"
                ) from None
            if _same_file(fd, lock):
                break
            os.close(fd)  # the owner released (unlinked) it between our open and flock: retry on the new file
        me = json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        _HELD[key] = fd
        guard_children()  # the owner's helpers must not outlive it and keep the run busy
        self.remove_stale_temps()

    def release_lock(self) -> None:
        """Give the run up: unlink `.lock` while still holding it (a waiter that opened the old file
        sees it is gone and retries), then close the descriptor, which releases the OS lock."""
        lock = self.root / ".lock"
        fd = _HELD.pop(str(lock.resolve()), None)
        if fd is None:
            return
        try:
            if _same_file(fd, lock):
                lock.unlink()
        finally:
            os.close(fd)

    def owns_lock(self) -> bool:
        """Whether this process holds the run's lock."""
        return str((self.root / ".lock").resolve()) in _HELD

    def lock_state(self) -> str:
        """'free', 'stale' (a file left by a dead owner) or 'held by PID' -- for `ts check`; takes nothing."""
        lock = self.root / ".lock"
        if self.owns_lock():
            return f"held by {os.getpid()} (this process)"
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return "free"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f"held by {_read_owner(fd).get('pid', 'an unknown process')}"
        finally:
            os.close(fd)
        return "stale"

    # -- what a killed writer leaves ----------------------------------------------------------
    def stale_temps(self) -> list[Path]:
        """Temp files (`*.tmp`) and folders (`.tmp_*`, `.old_*`) that writers of this run create and
        rename away; one still present belongs to a writer that was killed. Reports are left
        alone: `ts report` writes them without owning the run."""
        found: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            here = Path(dirpath)
            if here == self.reports or here == self.root / ".prefect-results":
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


_HELD: dict[str, int] = {}  # resolved .lock path -> descriptor whose flock this process holds


def _same_file(fd: int, path: Path) -> bool:
    """Whether the descriptor still names the file at `path` (not an unlinked or replaced one)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)


def _read_owner(fd: int) -> dict:
    """The {pid, host} an owner wrote into the lock file ({} while it is still empty or torn)."""
    try:
        owner = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


# -- ts check ---------------------------------------------------------------------------------


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
        damage.append(f"{run.config_path} is missing: this is not a complete run directory; start it again with `ts train`")
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
    return int(part.split("=", 1)[1]) if part.startswith("iteration=") and part.split("=", 1)[1].lstrip("-").isdigit() else -1


def _output_problem(run: RunDir, p: Path, expected: str | None) -> str | None:
    """Why one output is damaged (missing, a checkpoint failing its own manifest, a changed hash), or None."""
    from thinking_seeds.store.checkpoints import CheckpointError, verified

    if not p.exists():
        return "is missing"
    if p.is_dir():
        try:
            verified(p)
        except CheckpointError as e:
            return "is damaged (" + str(e).split(": re-run", 1)[0].split("; re-run", 1)[0].replace(f"checkpoint {p} ", "") + ")"
    if expected is not None and run.file_hash(p) != expected:
        return "no longer hashes as its stage manifest recorded"
    return None


# -- children die with their parent ------------------------------------------------------------

# Run by `python -c` in its own session; argv[1] is the pid it guards. While that process lives it
# notes the process's descendants (pid + start time) twice a second; once it is gone (exit or
# kill -9) it sends what is left SIGTERM, then SIGKILL. The start time makes sure a reused pid is
# never signalled.
_GUARD = r"""
import os, signal, sys, time
parent, me = int(sys.argv[1]), os.getpid()
signal.signal(signal.SIGINT, signal.SIG_IGN)
def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[19]
def descendants():
    kids = {}
    for d in os.listdir("/proc"):
        st = stat(d) if d.isdigit() else None
        if st:
            kids.setdefault(st[0], []).append((int(d), st[1]))
    out, todo = {}, [parent]
    while todo:
        for pid, start in kids.get(todo.pop(), []):
            if pid != me and pid not in out:
                out[pid] = start
                todo.append(pid)
    return out
known = {}
while os.getppid() == parent:
    known = descendants()
    time.sleep(0.5)
for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0)):
    left = [p for p, s in known.items() if (stat(p) or (0, None))[1] == s]
    for p in left:
        try:
            os.kill(p, sig)
        except OSError:
            pass
    end = time.time() + wait
    while time.time() < end and any((stat(p) or (0, None))[1] == known[p] for p in left):
        time.sleep(0.1)
"""

_GUARDED: dict[int, object] = {}  # pid of the guarded process -> its guard (one per process)


def guard_children() -> None:
    """Make every child of this process die with it, even after a kill -9 of this process alone.

    The Prefect temporary server, the verifier's workers, the resource tracker and the accelerate
    launcher are all children; without this, killing only the main process leaves them holding a
    port, ~200 MB and the run. A small guard process (started once per process, in its own session
    so Ctrl-C and group kills aimed at the run leave it to finish its job) stops them. Linux only;
    elsewhere a no-op.
    """
    import subprocess
    import sys

    if os.getpid() in _GUARDED or not Path("/proc/self/stat").exists():
        return
    _GUARDED[os.getpid()] = subprocess.Popen(
        [sys.executable, "-S", "-c", _GUARD, str(os.getpid())], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
