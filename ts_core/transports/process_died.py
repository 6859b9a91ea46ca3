"""A process the pipeline started died: one line that says which, how, why, and what to do.

`ProcessDied` (the persistent trainer's TrainerDied, pipeline/trainer_client.py) ends `ts` as a user's
mistake does (flows/cli/errors.py): exit code 2, no traceback, its first line the error and what
follows it (after a blank line) a few lines of the process's log, indented:

    error: persistent trainer (pid 4242) died in the update of iteration 2: killed by SIGKILL (out of host
    or GPU memory? the kernel's OOM killer sends it; `ts plan` shows what the run needs); full log:
    runs/r/trainer.log; rerun the same command to resume the run from its last finished stage
      <the log's last lines>

The exit status: the process's own (a negative code is the signal that killed it), or, when it is a
launcher whose worker died (torch's elastic agent), the worker's, read from the summary it logs.
"""

from __future__ import annotations

import re
import signal

TAIL_LINES = 5
RESUME = "rerun the same command to resume the run from its last finished stage"  # what a rerun does
# torch.distributed.elastic's summary of a failed worker: "exitcode  : -9 (pid: 1234)"
_ELASTIC_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+)")
_CAUSES = {
    signal.SIGKILL: "out of host or GPU memory? the kernel's OOM killer sends it; `ts plan` shows what the run needs",
    signal.SIGSEGV: "a crash in native code (a CUDA or driver fault?)",
    signal.SIGBUS: "a crash in native code (shared memory full? /dev/shm)",
    signal.SIGABRT: "an abort in native code (a CUDA error or a failed assertion in a library)",
    signal.SIGTERM: "something outside the run stopped it",
}


class ProcessDied(RuntimeError):
    """A process the pipeline started is gone. str(): one line, then a blank line and its log's tail."""


def how_it_ended(code: int | None, log_text: str = "") -> str:
    """'killed by SIGKILL (likely cause)', 'exit code 1', or 'still running': `code` is Popen's returncode;
    a launcher's own code 1 defers to its worker's status in the log (torch's elastic summary)."""
    if code is None:
        return "still running"
    if code > 0:
        worker = _ELASTIC_EXIT.search(log_text)
        if worker is not None and int(worker.group(1)) != 0:
            code = int(worker.group(1))
    if code >= 0:
        return f"exit code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"killed by signal {-code}"
    cause = _CAUSES.get(sig)
    return f"killed by {sig.name}" + (f" ({cause})" if cause else "")


def log_tail(log_text: str, n: int = TAIL_LINES, width: int = 300) -> str:
    """The log's last `n` non-empty lines, indented (each cut at `width` characters)."""
    lines = [line.rstrip() for line in log_text.splitlines() if line.strip()][-n:]
    return "\n".join("  " + (line if len(line) <= width else line[: width - 1] + "…") for line in lines)


def died(what: str, how: str, log_path, log_text: str, resume: str, cls: type[ProcessDied] = ProcessDied):
    """The error (a `cls`): `what` names the process and when it died, `how` is how_it_ended's text,
    `resume` says what a rerun does; the log's tail follows the line."""
    head = f"{what}: {how}; full log: {log_path}; {resume}"
    tail = log_tail(log_text)
    return cls(head + (f"\n\n{tail}" if tail else ""))
