"""A Ray worker that died once too often, in one line (transports/process_died.py's form).

Ray restarts a dead worker and `fan_out` (data/ray_pool.py) gives its shard to the next free one, up to
cluster.shard_retries times. Past that the run stops, and what Ray says is a dozen lines of actor ids and
numbered guesses; the user needs which worker, on which node, how it ended, where its log is, and that
a rerun resumes:

    error: Ray worker RolloutWorker (pid 4242, on 10.0.0.7) died on shard 3 (tried 4 times): its process
    exited unexpectedly (out of host or GPU memory? the kernel's OOM killer sends SIGKILL; `ts plan`
    shows what the run needs); full log: /tmp/ray/session_…/logs/worker-…-4242.err; rerun the
    same command to resume the run from its last finished stage
      <the log's last lines, when the log is on this machine>

Ray's message is parsed, not its objects: its fields (class_name, pid, ip, "Worker exit detail") are
printed lines that have kept their form across Ray 2.x, and a message without them still gives a line.
"""

from __future__ import annotations

import re
from pathlib import Path

from thinking_seeds.transports.process_died import RESUME, ProcessDied, died

OOM = "out of host or GPU memory? the kernel's OOM killer sends SIGKILL; `ts plan` shows what the run needs"
_FIELD = re.compile(r"^\s*(class_name|pid|ip):\s*(\S+)\s*$", re.MULTILINE)
_DETAIL = re.compile(r"Worker exit detail:\s*(.+?)(?:\. There are some potential root causes|$)", re.DOTALL)


class RayWorkerDied(ProcessDied):
    """A Ray worker died and its item ran out of retries (one line, then its log's tail)."""


def _how(message: str) -> str:
    """How the worker ended, from Ray's 'Worker exit detail' (its first sentence), with the likely cause."""
    m = _DETAIL.search(message)
    detail = " ".join(m.group(1).split()).rstrip(".") if m else ""
    if not detail:
        first = message.strip().splitlines()[0] if message.strip() else "no reason given"
        return f"{first.rstrip('.')} ({OOM})"
    if "connection error" in detail or "SIGKILL" in detail or "killed" in detail.lower():
        return f"its process exited unexpectedly: {detail} ({OOM})"
    return f"its process exited: {detail}"


def _worker_log(logs_dir: Path | None, pid: str) -> Path | None:
    """The worker's stderr log in this machine's Ray session (worker-<id>-<job>-<pid>.err), if here."""
    if logs_dir is None or not pid.isdigit():
        return None
    found = sorted(logs_dir.glob(f"worker-*-{pid}.err"))
    return found[-1] if found else None


def session_logs_dir(ray) -> Path | None:
    """This machine's Ray session logs folder (the driver's node), or None when Ray does not say."""
    try:
        return Path(ray._private.worker._global_node.get_logs_dir_path())
    except Exception:  # a private API: a Ray without it only loses the log's tail
        return None


def worker_died(message: str, item: int, tries: int, logs_dir: Path | None) -> RayWorkerDied:
    """The error for item `item` whose worker died on its `tries`-th try; `message` is Ray's
    (str of the RayActorError), `logs_dir` this machine's Ray session logs folder (None: unknown)."""
    fields = dict(_FIELD.findall(message))
    name = f" {fields['class_name']}" if "class_name" in fields else ""
    pid, ip = fields.get("pid", ""), fields.get("ip", "")
    where = ", ".join(x for x in (f"pid {pid}" if pid else "", f"on {ip}" if ip else "") if x)
    log = _worker_log(logs_dir, pid)
    if log is not None:
        log_place, text = str(log), log.read_text(errors="replace")[-20_000:]
    else:
        text = ""
        log_place = (f"worker-*-{pid}.err" if pid else "the worker's .err file") + " in the Ray session's logs folder"
        log_place += f" on {ip}" if ip else ""
    what = (
        f"Ray worker{name}"
        + (f" ({where})" if where else "")
        + f" died on shard {item} (tried {tries} time{'s' if tries != 1 else ''})"
    )
    return died(what, _how(message), log_place, text, RESUME, RayWorkerDied)
