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

- rank 0 connects to the pipeline's Unix socket `S` and reads one JSON job per line (the wire:
  transports/trainer_socket.py; an update
  job of train/resident.py: a chain of updates from a checkpoint, whether to write the end's
  checkpoint, whether to hand its weights over; `{"op": "flush"}`: wait for the checkpoint being
  written; `{"op": "stop"}`), then broadcasts it to the other ranks (broadcast_object_list: every
  rank runs the same job); while none comes it broadcasts an idle beat every 30 s, so no rank sits in
  a collective long enough to hit its timeout (30 minutes: the limit of a hung update);
- the job runs the very trainer code of the per-update launch (`trainer.update_state`); rank 0
  answers one JSON line with the metrics and, with "handoff", θ_{k+1}'s tensors' bytes right after
  it on the socket (transports/weights.py `send_weights`: the pipeline's engine loads them; no file). On
  CUDA the hook for IPC handles instead of bytes is `send_weights` / `receive_weights` there. Every
  `checkpoint.every` iterations θ_{k+1} is also written to `policy/step_<k+1>/` with its AdamW
  state, from a CPU copy in a background thread (train/resident.py).

Model and AdamW stay in memory between jobs, tagged with the identity of the policy they are (a
digest of the run's manifests: pipeline/policy_chain.py) plus the config hash and the reference.
A job whose chain does not start from what is held -- the first job, a resumed run, a redone stage
-- loads the chain's base checkpoint and replays the updates since (train/resident.py). Rank 0
decides and broadcasts the decision with the job, so every rank reloads or none does. Keeping θ in
memory therefore gives what the per-update launch reading the same checkpoint and rollouts would:
the same weights, bit for bit (tests/e2e/test_update_processes.py).

Dying: the pipeline going away closes the socket (EOF: rank 0 broadcasts a stop and every rank
exits) and, for a kill -9 in the middle of an update, PR_SET_PDEATHSIG takes the launcher and its
workers down (child_guard.die_with_parent; each worker sets it towards its own parent too), so
no orphan writes θ_{k+1} behind a resumed run (on EOF a checkpoint still being written is given up:
a resumed run replays it; a stop waits for it). A failing job answers its error and exits non-zero:
a rank that raised alone would leave the others waiting in a collective.
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import sys
from datetime import timedelta
from pathlib import Path

import torch

from thinking_seeds.config import load_saved_config
from thinking_seeds.train.resident import Resident
from thinking_seeds.transports.trainer_socket import decode, error_answer, send
from thinking_seeds.transports.weights import send_weights, weights_header

# A collective that waits longer than this raises (and the trainer exits, which the pipeline sees): a
# hung update fails instead of hanging. Idle ranks never wait that long: while no job comes, rank 0
# broadcasts an idle beat every IDLE_BEAT_S (the pipeline may generate for an hour between updates).
# Both can be set in the environment (seconds), for the tests and for a cluster with slow collectives.
COLLECTIVE_TIMEOUT = timedelta(seconds=float(os.environ.get("TS_TRAINER_COLLECTIVE_TIMEOUT_S", 1800)))
IDLE_BEAT_S = float(os.environ.get("TS_TRAINER_IDLE_BEAT_S", 30))


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
    """The trainer's state between jobs (train/resident.py: θ in memory, named by its lineage)."""

    def __init__(self, accelerator):
        self.acc = accelerator
        self.resident = Resident(accelerator)
        self.outgoing: dict | None = None  # the weights of the last answer, sent after it

    def run(self, job: dict) -> dict:
        """One job on every rank (`job["start"]`: rank 0's plan); rank 0's answer."""
        metrics, replayed = self.resident.run(job, job["start"])
        answer: dict = {"metrics": metrics, "replayed": replayed}
        self.outgoing = None
        if job.get("handoff") and self.acc.is_main_process:
            # in the engine's dtype (bf16 under mixed precision), once for the header and the bytes
            cfg = load_saved_config(Path(job["config"]), check_outside=False)
            self.outgoing = self.resident.weights(getattr(torch, cfg.engine_dtype))
            answer["weights"] = weights_header(self.outgoing)  # the bytes follow the answer
        return answer


def _receive(conn: socket.socket, f) -> dict:
    """The next job from the pipeline; a stop on EOF (the pipeline closed the socket or died); an
    idle beat when none came within IDLE_BEAT_S (the pipeline sends one job and waits for its answer,
    so nothing is ever left in `f`'s buffer for select to miss)."""
    if not select.select([conn], [], [], IDLE_BEAT_S)[0]:
        return {"op": "idle"}
    line = f.readline()
    return decode(line) if line else {"op": "stop", "reason": "eof"}


def serve(accelerator, sock_path: str) -> bool:
    """Take jobs until a stop; True when the stop was the pipeline's socket closing without one (EOF:
    the pipeline died), so every rank can leave with a failure code (a `ts trainer-node` exits 1)."""
    main = accelerator.is_main_process
    conn = f = None
    if main:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(sock_path)
        f = conn.makefile("rwb")
        send(f, {"op": "hello", "pid": os.getpid(), "world": accelerator.num_processes})
    server = Server(accelerator)
    while True:
        box = [None]
        if main:
            job = _receive(conn, f)
            if job.get("op") == "update":
                job["start"] = server.resident.plan(job)
            box = [job]
        if accelerator.num_processes > 1:
            torch.distributed.broadcast_object_list(box, src=0)
        job = box[0]
        if job.get("op") == "idle":
            continue
        if job.get("op") not in ("flush", "update"):
            if job.get("reason") != "eof":  # a stop: the last checkpoint first; EOF: the pipeline is gone
                server.resident.flush()
            return job.get("reason") == "eof"
        try:
            if job["op"] == "flush":  # the pipeline waits for the checkpoint in progress (snapshot, end)
                server.resident.flush()
                answer = {}
            else:
                answer = server.run(job)
        except Exception as e:
            if main:
                send(f, error_answer(e))
            raise
        if main:
            send(f, {"ok": True, **answer})
            if answer.get("weights"):
                send_weights(f, server.outgoing)
                server.outgoing = None  # a cast copy (mixed precision) is freed once sent


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
    pipeline_gone = serve(acc, a.socket)
    # Leave together: a gloo process that exits with the group alive can abort.
    acc.wait_for_everyone()
    acc.end_training()
    if pipeline_gone:
        sys.exit(1)  # the run's pipeline died without stopping its trainer group: not a clean end


if __name__ == "__main__":
    main()
