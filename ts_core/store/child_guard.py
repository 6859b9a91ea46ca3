"""Children die with their parent: a small guard process per owner of a run directory.

The Prefect temporary server, the verifier's workers, the resource tracker and the accelerate
launcher are all children of a training process; without the guard, killing only the main process
(kill -9) leaves them holding a port, ~200 MB and the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["die_with_parent", "guard_children"]

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


def die_with_parent() -> None:
    """A `preexec_fn` for a child started in its own session: SIGTERM to it when its parent dies
    (Linux PR_SET_PDEATHSIG, kept across exec). No guard's half-second look is needed for it, so
    a kill -9 right after the child started leaves nothing either. Elsewhere a no-op."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


_GUARDED: dict[int, object] = {}  # pid of the guarded process -> its guard (one per process)


def guard_children() -> None:
    """Make every child of this process die with it, even after a kill -9 of this process alone.

    A small guard process (started once per process, in its own session
    so Ctrl-C and group kills aimed at the run leave it to finish its job) stops them. Linux only;
    elsewhere a no-op.
    """
    if os.getpid() in _GUARDED or not Path("/proc/self/stat").exists():
        return
    _GUARDED[os.getpid()] = subprocess.Popen(
        [sys.executable, "-S", "-c", _GUARD, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
