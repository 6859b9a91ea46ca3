"""The pipeline's end of the persistent trainer (train/trainer_server.py): launch, jobs, teardown.

`update.launcher=accelerate` (the default) starts `accelerate launch -m
thinking_seeds.train.trainer_server` (a group of one: the launch's child itself, without the launcher's
interpreter; update_launcher.without_launcher) when the run starts (`prelaunch_trainer`, right after prepare:
it starts while θ_0 is evaluated and iteration 0 samples; else the first update stage of the run
launches it), in this process, and sends it every update of the run as one JSON line over a Unix
socket (a chain of updates: pipeline/policy_chain.py); the answer is one JSON line with the
metrics, followed by θ_{k+1}'s tensors' bytes when the engine takes them from memory
(`receive_weights`). The trainer writes `policy/step_<k+1>/` itself at checkpoint steps; the update
stage writes the manifest, so resume works as with the other launchers. The wire itself, which both
ends share, is transports/trainer_socket.py (the socket's folder and its messages) and
transports/weights.py (θ's bytes).

Why a socket the pipeline listens on: the pipeline learns of a dead trainer at once (EOF) and the
trainer of a dead pipeline (EOF); a file queue would need polling and leases on both sides. The
socket lives in a private temp directory, not in the run directory (`socket_dir`: a Unix socket's
path is short). The trainer's output goes to a log file next to it; its tail is in every error.

Never a hang: every wait (the trainer's start, each job) polls the launcher process every
`POLL_S`; its exit, or EOF on the socket, raises TrainerDied at once: one line naming the process, its
exit signal or code and the likely cause, the log's last lines under it (transports/process_died.py), the
whole log copied to the run's folder (`trainer.log`: the socket's folder goes with the trainer). The start
has a deadline (`START_TIMEOUT_S`); a job has none, since an update may legitimately take hours, but
a trainer that dies in it is reported within `POLL_S`, and one hung in a collective raises there
after the trainer's collective timeout (30 minutes, trainer_server.py) and exits. After any failure
the handle is dropped, so the next update (a retry, or the resumed run) launches a fresh trainer,
which reloads the newest checkpoint and replays the updates since.

A group across machines (update.num_machines > 1): this launch is machine rank 0; every other
machine runs `ts trainer-node` (`join_trainer_group`: the same launch from the run's config.yaml with
its own --machine_rank, no socket), and the start's deadline covers their joining.

The run holds its trainer (`trainer_for`; pipeline/run_resources.py), as it holds its engine: the
Prefect flow's stage tasks build a Session per task, and all of them reach the same trainer. The run's
close stops it (at once after a Ctrl-C), and so does the exit of the process.
"""

from __future__ import annotations

import contextlib
import functools
import selectors
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

from thinking_seeds.config import RunConfig
from thinking_seeds.pipeline.run_resources import drop_process, held_process, hold, stop_everywhere
from thinking_seeds.pipeline.update_launcher import launch_env, launch_prefix, without_launcher
from thinking_seeds.store.child_guard import die_with_parent
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.transports import weights
from thinking_seeds.transports.process_died import RESUME as RUN_RESUMES
from thinking_seeds.transports.process_died import ProcessDied, died, how_it_ended
from thinking_seeds.transports.trainer_socket import (
    LOG_NAME,
    SOCKET_NAME,
    STOP,
    USER_ERRORS,
    decode,
    encode,
    socket_dir,
)

START_TIMEOUT_S = 600.0  # imports + process group on a loaded 2-core box take 5-30 s; a GPU node's NCCL more
POLL_S = 0.2
STOP_TIMEOUT_S = 30.0
SOCKET_CLOSED = ": its socket closed"
EXIT_WAIT_S = 10.0  # a closed socket comes before the exit status (a launcher stops its other ranks first)
RESUME = f"{RUN_RESUMES} (θ_k is reloaded from disk)"


class TrainerDied(ProcessDied):
    """The persistent trainer exited, closed its socket, or did not start in time (one line: process_died.py)."""


def trainer_command(run: RunDir, cfg: RunConfig, sock_path: Path) -> list[str]:
    """The driver's launch of the trainer group: machine rank 0, whose global rank 0 takes the jobs."""
    prefix, cpu = launch_prefix(cfg)
    cmd = prefix + ["-m", "thinking_seeds.train.trainer_server", "--socket", str(sock_path)]
    cmd += ["--out-root", str(run.policy_root)]  # names the run in `ps` (and for the orphan test)
    return cmd + (["--cpu"] if cpu else [])


def node_command(run: RunDir, cfg: RunConfig, machine_rank: int) -> list[str]:
    """Another machine's launch of the run's trainer group (`ts trainer-node`): the same launch with its
    own --machine_rank and no socket; its processes take every job from rank 0's broadcast."""
    machines = cfg.update.num_machines
    if cfg.update.launcher != "accelerate" or machines < 2:
        raise ValueError(
            f"run {run.run_id} trains on one machine (update.launcher={cfg.update.launcher}, "
            f"update.num_machines={machines}): no trainer node to join; start the run with "
            "update.launcher=accelerate and update.num_machines >= 2"
        )
    if not 1 <= machine_rank < machines:
        raise ValueError(
            f"--machine-rank {machine_rank}: run {run.run_id}'s trainer group has machine ranks 1 .. {machines - 1} "
            "to join (rank 0 is the driver's own launch)"
        )
    prefix, cpu = launch_prefix(cfg, machine_rank)
    cmd = prefix + ["-m", "thinking_seeds.train.trainer_server", "--out-root", str(run.policy_root)]
    return cmd + (["--cpu"] if cpu else [])


class PersistentTrainer:
    """One launched trainer process group and its socket."""

    def __init__(self, run: RunDir, cfg: RunConfig):
        self.key, self.run = _key(run, cfg), run
        self.held_id: str | None = None  # the policy the trainer holds (pipeline/policy_chain.py), once known
        # A checkpoint the trainer may still be writing (a job with save="background" answered, no flush
        # since): a trainer that dies meanwhile leaves that checkpoint missing (flush_trainer).
        self.writing = False
        self.machines, self.run_id = cfg.update.num_machines, run.run_id
        self.lock = threading.Lock()
        self.conn: socket.socket | None = None
        self.file = None
        self.dir = socket_dir(run)
        self.log_path = self.dir / LOG_NAME
        self.sock_path = self.dir / SOCKET_NAME
        # Launched here, connected at its first job (`_ready`): the launch (interpreter, imports, process
        # group: seconds) runs beside whatever the pipeline does until then (prelaunch_trainer).
        self.listener: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            cmd = trainer_command(run, cfg, self.sock_path)  # a device this machine lacks: ValueError
            self.listener.bind(str(self.sock_path))
            self.listener.listen(1)
            self.cmd, env = without_launcher(cmd, launch_env())  # one process: no launcher interpreter in between
            with self.log_path.open("wb") as log:
                # Its own session: the terminal's Ctrl-C reaches only the pipeline, which stops it (close).
                self.proc = subprocess.Popen(
                    self.cmd,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                    start_new_session=True,
                )
        except BaseException:
            self.listener.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.deadline = time.monotonic() + START_TIMEOUT_S

    # -- liveness --------------------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _died(self, what: str) -> TrainerDied:
        code = self.proc.poll()
        if code is None and what.endswith(SOCKET_CLOSED):
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=EXIT_WAIT_S)
        if code is not None:  # the exit status says more than the closed socket
            what = what.removesuffix(SOCKET_CLOSED)
        text = self.log_text()
        kept = self.run.root / LOG_NAME  # the socket's folder, and its log, go with the trainer
        try:
            kept.write_text(text)
        except OSError:
            kept = self.log_path
        pid = getattr(self, "worker_pid", self.proc.pid)  # rank 0's, once it said hello
        return died(f"persistent trainer (pid {pid}) {what}", how_it_ended(code, text), kept, text, RESUME, TrainerDied)

    def _wait_readable(self, sock: socket.socket, deadline: float | None, what: str) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(sock, selectors.EVENT_READ)
            while not sel.select(POLL_S):
                if self.proc.poll() is not None:
                    raise self._died(what)
                if deadline is not None and time.monotonic() > deadline:
                    raise self._died(f"{what}: no answer within {START_TIMEOUT_S:.0f} s")

    def _ready(self) -> None:
        """Wait (once) until the launched trainer has connected and said hello."""
        if self.conn is not None:
            return
        what = "did not start"
        if self.machines > 1:  # rank 0 waits in the rendezvous until every machine has joined
            what += (
                f" (machine ranks 1 .. {self.machines - 1} must join it: "
                f"`ts trainer-node --run-id {self.run_id} --machine-rank R` on each)"
            )
        self._wait_readable(self.listener, self.deadline, what)
        self.conn, _ = self.listener.accept()
        self.listener.close()
        self.listener = None
        self.file = self.conn.makefile("rwb")
        hello = self._read("did not start")
        if hello.get("op") != "hello":
            raise self._died(f"sent {hello!r} instead of its hello")
        self.world, self.worker_pid = hello["world"], hello["pid"]  # rank 0's pid

    def _read(self, what: str) -> dict:
        self._wait_readable(self.conn, None, what)
        try:
            line = self.file.readline()
        except ConnectionResetError:  # a trainer killed with unread bytes on its socket: gone, as at EOF
            line = b""
        if not line:
            raise self._died(what + SOCKET_CLOSED)
        return decode(line)

    # -- jobs ------------------------------------------------------------------------------
    def alive(self) -> bool:
        """Running, and connected or still starting."""
        return self.proc.poll() is None and (self.conn is not None or self.listener is not None)

    def ready(self) -> PersistentTrainer:
        """Connected: wait for a trainer that is still starting (TrainerDied if it does not)."""
        with self.lock:
            self._ready()
        return self

    def job(self, job: dict, what: str) -> dict:
        """One job (pipeline/policy_chain.py: an update chain, or a flush); the answer. TrainerDied /
        ValueError on failure. A handed-over θ is read from shared memory here and its file removed."""
        with self.lock:
            self._ready()
            try:
                self.file.write(encode(job))
                self.file.flush()
            except OSError as e:
                raise self._died(f"could not take the {what} ({e})") from e
            answer = self._read(f"died in the {what}")
            if answer.get("ok"):
                self.writing = job.get("save") == "background" or (self.writing and job.get("op") != "flush")
            if answer.get("ok") and answer.get("weights"):
                answer["weights"] = self.receive_weights(answer["weights"], what)
        if answer.get("ok"):
            return answer
        msg = f"{what} failed in the persistent trainer: {answer['type']}: {answer['error']}"
        if answer["type"] in USER_ERRORS:
            raise ValueError(msg)  # a mistake the user can fix: one line (flows/cli/errors.py)
        raise RuntimeError(f"{msg}\n{answer['traceback']}")

    def receive_weights(self, header: list, what: str) -> dict:
        """θ's tensors, whose bytes follow the answer line, read straight into tensors of this process
        (transports/weights.py: the hand-over that measured faster than /dev/shm)."""
        return weights.receive_weights(
            self.file, header, lambda: self._died(f"{what}: its socket closed while sending θ")
        )

    def close(self, at_once: bool = False) -> None:
        """Ask the trainer to stop, wait for it (then terminate, then kill), remove the socket's folder.

        at_once: terminate it now (an interrupted update: it would finish the update before reading a stop).
        A trainer that never got its first job (a run that ended before update 0) is terminated at once
        too: it cannot read a stop, and waiting would add STOP_TIMEOUT_S to that run's end.
        """
        at_once = at_once or self.file is None
        if not at_once:
            with contextlib.suppress(OSError):
                self.file.write(encode(STOP))
                self.file.flush()
        if at_once and self.proc.poll() is None:
            self.proc.terminate()  # accelerate's launcher stops its workers on SIGTERM
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.terminate()  # accelerate's launcher stops its workers on SIGTERM
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.file, self.conn, self.listener):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        self.file = self.conn = self.listener = None
        shutil.rmtree(self.dir, ignore_errors=True)


def join_trainer_group(run: RunDir, machine_rank: int, wait_s: float = 600.0, poll_s: float = 1.0) -> int:
    """`ts trainer-node`: run this machine's part of the run's trainer group until the group stops; its exit code.

    The launch settings come from the run's config.yaml (the driver writes it when the run starts: waited
    for up to `wait_s`), so every machine launches what the driver launches, with its own rank.
    """
    from thinking_seeds.config import load_saved_config

    deadline = time.monotonic() + wait_s
    while not run.config_path.exists():
        if time.monotonic() > deadline:
            raise ValueError(
                f"no {run.config_path} after {wait_s:.0f} s: start the run on the driver's machine first, and give "
                "this machine the same runs folder (a shared filesystem; --runs-dir or TS_RUNS_DIR)"
            )
        time.sleep(poll_s)
    # nothing the config names is imported: a trainer never calls a reward fn or a tracker
    cmd = node_command(run, load_saved_config(run.config_path, check_outside=False), machine_rank)
    print("trainer node: " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, env=launch_env(), preexec_fn=die_with_parent)
    try:
        return proc.wait()
    except BaseException:
        proc.terminate()  # accelerate's launcher stops its workers on SIGTERM
        proc.wait()
        raise


def _key(run: RunDir, cfg: RunConfig) -> tuple:
    """What the launch fixes: the run, and the processes, machines, precision and device of the launch."""
    u = cfg.update
    group = (u.num_processes, u.num_machines, u.main_process_ip, u.main_process_port)
    return (str(run.root.resolve()), *group, u.mixed_precision, cfg.device)


def trainer_for(run: RunDir, cfg: RunConfig) -> PersistentTrainer:
    """The run's trainer, launched if it holds none (or the last one died, or the launch settings changed).
    One at a time per process (run_resources.ONE_PER_PROCESS): a trainer of another run holds memory."""
    make = functools.partial(PersistentTrainer, run, cfg)
    return hold(run, "trainer", _key(run, cfg), make, PersistentTrainer.close, PersistentTrainer.alive)


def prelaunch_trainer(run: RunDir, cfg: RunConfig) -> None:
    """Launch the run's persistent trainer now, without waiting for it, when the run has an update
    left: its start (an interpreter importing torch, the process group) then runs beside the θ_0
    evaluation and iteration 0's sampling instead of before update 0."""
    if cfg.update.launcher == "accelerate" and not run.manifest_path(cfg.iterations - 1, "update").exists():
        trainer_for(run, cfg)


def drop_trainer(t: PersistentTrainer, at_once: bool = True) -> None:
    """Forget a failed trainer (and stop what is left of it): the next update launches a fresh one."""
    drop_process(t.run, "trainer", t)
    t.close(at_once)


def close_trainers(at_once: bool = False) -> None:
    """Stop every run's trainer in this process (at_once: terminate now). A run's own close stops its trainer."""
    stop_everywhere("trainer", at_once)


def persistent_job(run: RunDir, cfg: RunConfig, job: dict, what: str) -> dict:
    """One job in the run's persistent trainer (launched if needed); any failure drops the trainer."""
    t = trainer_for(run, cfg)
    try:
        return t.job(job, what)
    except (ValueError, TrainerDied, RuntimeError):
        drop_trainer(t, at_once=False)  # it answered an error and is exiting, or it is gone already
        raise
    except BaseException:
        drop_trainer(t)  # Ctrl-C, or anything else in the middle of an update: stop it now
        raise


def flush_trainer(run: RunDir, cfg: RunConfig) -> None:
    """Wait until the checkpoint the run's trainer writes in the background is on disk.

    A trainer that died while it wrote one (killed in the write: what the OOM killer does) is
    TrainerDied here, with its signal and log, rather than a "checkpoint θ_k does not exist" at
    the next stage that reads θ_k (the snapshot): which of the two a run met depended on whether
    the death was noticed before the flush."""
    t = held_process(run, "trainer", _key(run, cfg))
    if t is None or t.file is None or not t.writing:
        return
    if not t.alive():
        error = t._died("died in the checkpoint write")  # reads its log before drop_trainer removes it
        drop_trainer(t, at_once=False)
        raise error
    try:
        t.job({"op": "flush"}, "checkpoint write")
    except TrainerDied:
        drop_trainer(t, at_once=False)
        raise


def held_trainer(run: RunDir, cfg: RunConfig) -> PersistentTrainer | None:
    """The run's live persistent trainer in this process, if there is one (nothing is launched)."""
    t = held_process(run, "trainer", _key(run, cfg))
    return t if t is not None and t.alive() else None
