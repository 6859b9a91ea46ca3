"""The persistent trainer's socket: where it lives and what crosses it (one JSON message a line).

Written and read by both ends:
- the pipeline's process (`ts`, the flow; pipeline/trainer_client.py) makes the folder, listens on the
  socket, writes a job and reads its answer;
- the trainer group's rank 0 (`accelerate launch -m thinking_seeds.train.trainer_server`,
  train/trainer_server.py) connects, writes its hello, reads each job and writes one answer per job.

The socket lives in a private temp folder, not in the run directory: a Unix socket path is limited to
~107 bytes, which a run directory under pytest's or a user's deep tree exceeds, and the run directory
holds only what resume reads. The folder is named by the run and the pipeline's pid,
/tmp/ts-trainer-<run tag>-<pid>-<random>, so that a folder whose pipeline died (kill -9) is removed at
the run's next start. The trainer's output goes to a log file next to the socket.

Messages, one JSON object and b"\\n" each:

    trainer -> pipeline   {"op": "hello", "pid": rank 0's pid, "world": processes in the group}
    pipeline -> trainer   {"op": "update", ...}    a chain of updates (train/resident.py, pipeline/policy_chain.py)
                          {"op": "flush"}          wait for the checkpoint being written
                          {"op": "stop"}           write the last checkpoint and exit
    trainer -> pipeline   {"ok": true, ...}        the answer: metrics; "weights", a header whose tensors'
                                                   bytes follow the line (transports/weights.py)
                          {"ok": false, "type", "error", "traceback"}   the job failed; the trainer exits

EOF (the socket closed) is a stop on the trainer's side and a dead trainer on the pipeline's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import traceback
from pathlib import Path

from thinking_seeds.store.run_dir import RunDir

SOCKET_NAME = "sock"  # in the socket folder: the socket the pipeline listens on
LOG_NAME = "trainer.log"  # in the socket folder: the trainer group's stdout and stderr
STOP = {"op": "stop"}
# Failures a user can fix (a config, the data, a checkpoint): the pipeline raises them as ValueError (one line).
USER_ERRORS = ("ValueError", "ConfigError", "DataError", "CheckpointError", "ModelError")


def _run_tag(run: RunDir) -> str:
    return hashlib.sha256(str(run.root.resolve()).encode()).hexdigest()[:10]


def socket_dir(run: RunDir) -> Path:
    """A new folder for the trainer's socket and log, outside the run (a Unix socket's path must stay
    under ~100 bytes): /tmp/ts-trainer-<run tag>-<pid>-<random>. Folders of this run left by a pipeline
    that died (kill -9: nothing ran its close) are removed first, so none outlives the next start."""
    remove_stale_socket_dirs(run)
    return Path(tempfile.mkdtemp(prefix=f"ts-trainer-{_run_tag(run)}-{os.getpid()}-"))


def remove_stale_socket_dirs(run: RunDir) -> list[Path]:
    """Remove this run's socket folders whose pipeline process is gone; the ones removed."""
    gone = []
    for d in Path(tempfile.gettempdir()).glob(f"ts-trainer-{_run_tag(run)}-*"):
        pid = d.name.split("-")[3] if d.name.count("-") >= 4 else ""
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def encode(msg: dict) -> bytes:
    """One message as it crosses the socket: a JSON line."""
    return json.dumps(msg).encode() + b"\n"


def decode(line: bytes) -> dict:
    """The message of one line read from the socket (not empty: an empty read is EOF)."""
    return json.loads(line)


def send(f, msg: dict) -> None:
    """Write one message to the socket's file and flush it."""
    f.write(encode(msg))
    f.flush()


def error_answer(e: Exception) -> dict:
    """The answer of a failed job (call it in the `except` that caught `e`: the traceback is the current one)."""
    return {"ok": False, "type": type(e).__name__, "error": str(e), "traceback": traceback.format_exc()}
