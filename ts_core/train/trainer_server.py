"""The persistent trainer: one `accelerate launch` per run, many updates (issue #12).

    accelerate launch [--multi_gpu --num_processes N] -m thinking_seeds.train.trainer_server \\
        --socket S --out-root RUN/policy [--cpu]

A group across machines (update.num_machines = M) is one such launch per machine with
`--num_machines M --machine_rank r --main_process_ip IP --main_process_port P`: the driver's is rank 0
(its global rank 0 holds the socket); the others (`ts trainer-node`) have no socket and take every
job from rank 0's broadcast, reading θ_k and the rollouts from the same paths (a shared filesystem).

Launching the trainer per update costs a fresh interpreter, the torch/transformers/accelerate
imports, a process group and a model load every iteration (~5 s on the tiny preset, 3x the whole
in-process iteration: BENCHMARKS.md). This process group is started once by the pipeline
(pipeline/trainer_client.py) and then serves update jobs:

- rank 0 connects to the pipeline's Unix socket `S` and reads one JSON job per line
  (`{"op": "update", "policy", "rollouts", "out_root", "step", "config", "ref"}` or `{"op": "stop"}`),
  then broadcasts it to the other ranks (broadcast_object_list: every rank runs the same job);
  while none comes it broadcasts an idle beat every 30 s, so no rank sits in a collective long
  enough to hit its timeout (30 minutes: the limit of a hung update);
- the job runs the very trainer code of the per-update launch (`trainer.update_state`), which writes
  θ_{k+1} to `policy/step_<k+1>/` exactly as before; rank 0 answers one JSON line with the metrics.
  The pipeline verifies the checkpoint and writes the stage manifest: the on-disk contract, and so
  resume, are those of the other launchers.

Model and AdamW stay in memory between jobs, tagged with the identity of the checkpoint they equal
(the sha256 of its manifest.json, which hashes every file, plus the config hash and the reference).
A job whose base checkpoint has another identity -- the first job, a resumed run, a redone stage, a
checkpoint rewritten under us -- reloads from disk first. Rank 0 decides and broadcasts the decision
with the job, so every rank reloads or none does. Keeping θ in memory is therefore only ever used
when it equals the file the per-update launch would have read: the same weights, bit for bit
(tests/e2e/test_update_processes.py).

Dying: the pipeline going away closes the socket (EOF: rank 0 broadcasts a stop and every rank
exits) and, for a kill -9 in the middle of an update, PR_SET_PDEATHSIG takes the launcher and its
workers down (update_launcher._die_with_parent; each worker sets it towards its own parent too), so
no orphan writes θ_{k+1} behind a resumed run. A failing job answers its error and exits non-zero:
a rank that raised alone would leave the others waiting in a collective.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import socket
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch

from thinking_seeds.config import load_saved_config
from thinking_seeds.train.trainer import TrainState, load_state, update_state

# A collective that waits longer than this raises (and the trainer exits, which the pipeline sees): a
# hung update fails instead of hanging. Idle ranks never wait that long: while no job comes, rank 0
# broadcasts an idle beat every IDLE_BEAT_S (the pipeline may generate for an hour between updates).
# Both can be set in the environment (seconds), for the tests and for a cluster with slow collectives.
COLLECTIVE_TIMEOUT = timedelta(seconds=float(os.environ.get("TS_TRAINER_COLLECTIVE_TIMEOUT_S", 1800)))
IDLE_BEAT_S = float(os.environ.get("TS_TRAINER_IDLE_BEAT_S", 30))


def checkpoint_identity(path: Path) -> str | None:
    """The sha256 of a checkpoint's manifest.json (it lists every file's sha256), or None if absent."""
    try:
        return hashlib.sha256((Path(path) / "manifest.json").read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def die_with_parent() -> None:
    """SIGTERM this worker when its parent (the launcher, or torch's elastic agent) dies."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux
    if os.getppid() == 1:  # the parent died before prctl
        sys.exit(1)


class Server:
    """The trainer's state between jobs: θ in memory and which checkpoint it equals."""

    def __init__(self, accelerator):
        self.acc = accelerator
        self.state: TrainState | None = None
        self.holds: tuple | None = None  # (checkpoint identity, config hash, ref) of the state, on rank 0

    def needs_reload(self, job: dict) -> bool:
        """On rank 0: does the job's base checkpoint differ from what is in memory?"""
        cfg_hash = load_saved_config(Path(job["config"]), check_outside=False).config_hash()
        want = (checkpoint_identity(Path(job["policy"])), cfg_hash, job.get("ref"))
        return self.state is None or want[0] is None or want != self.holds

    def run(self, job: dict) -> dict:
        cfg = load_saved_config(Path(job["config"]), check_outside=False)
        ref = Path(job["ref"]) if job.get("ref") else None
        reloaded = job["reload"]
        if reloaded:
            self.state = None
            self.acc.free_memory()  # drop the last state's DDP wrapper and optimizer references
            self.state = load_state(Path(job["policy"]), cfg, ref, self.acc)
        metrics = update_state(
            self.state, Path(job["rollouts"]), Path(job["out_root"]), job["step"], cfg, self.acc, keep=True
        )
        if self.acc.is_main_process:
            out = Path(job["out_root"]) / f"step_{job['step']:06d}"
            self.holds = (checkpoint_identity(out), cfg.config_hash(), job.get("ref"))
            metrics["perf/trainer_reloaded"] = float(reloaded)
        return metrics


def _send(f, msg: dict) -> None:
    f.write(json.dumps(msg).encode() + b"\n")
    f.flush()


def _receive(conn: socket.socket, f) -> dict:
    """The next job from the pipeline; a stop on EOF (the pipeline closed the socket or died); an
    idle beat when none came within IDLE_BEAT_S (the pipeline sends one job and waits for its answer,
    so nothing is ever left in `f`'s buffer for select to miss)."""
    if not select.select([conn], [], [], IDLE_BEAT_S)[0]:
        return {"op": "idle"}
    line = f.readline()
    return json.loads(line) if line else {"op": "stop", "reason": "eof"}


def serve(accelerator, sock_path: str) -> None:
    main = accelerator.is_main_process
    conn = f = None
    if main:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(sock_path)
        f = conn.makefile("rwb")
        _send(f, {"op": "hello", "pid": os.getpid(), "world": accelerator.num_processes})
    server = Server(accelerator)
    while True:
        box = [None]
        if main:
            job = _receive(conn, f)
            if job.get("op") == "update":
                job["reload"] = server.needs_reload(job)
            box = [job]
        if accelerator.num_processes > 1:
            torch.distributed.broadcast_object_list(box, src=0)
        job = box[0]
        if job.get("op") == "idle":
            continue
        if job.get("op") != "update":
            break
        try:
            metrics = server.run(job)
        except Exception as e:
            if main:
                _send(f, {"ok": False, "type": type(e).__name__, "error": str(e), "traceback": traceback.format_exc()})
            raise
        if main:
            _send(f, {"ok": True, "metrics": metrics})


def main() -> None:
    """Entry point for `accelerate launch -m thinking_seeds.train.trainer_server`."""
    from accelerate import Accelerator, InitProcessGroupKwargs

    ap = argparse.ArgumentParser(description="The persistent trainer of a run (started by the pipeline).")
    ap.add_argument("--socket", help="the pipeline's Unix socket (on rank 0's machine; `ts trainer-node`s have none)")
    ap.add_argument("--out-root", type=Path, required=True, help="the run's policy dir (names the run in ps)")
    ap.add_argument("--cpu", action="store_true", help="force CPU (gloo) even if a GPU is visible")
    a = ap.parse_args()
    die_with_parent()
    acc = Accelerator(cpu=a.cpu, kwargs_handlers=[InitProcessGroupKwargs(timeout=COLLECTIVE_TIMEOUT)])
    if acc.is_main_process and not a.socket:
        raise SystemExit(
            "trainer_server: global rank 0 needs --socket; machine rank 0 is the driver's own launch "
            "(update.launcher=accelerate), `ts trainer-node` starts ranks 1 .. num_machines - 1 only"
        )
    serve(acc, a.socket)
    # Leave together: a gloo process that exits with the group alive can abort.
    acc.wait_for_everyone()
    acc.end_training()


if __name__ == "__main__":
    main()
