"""Who owns a run directory: an OS lock (flock) on `<run>/.lock`, held for the life of the process.

Atomic, and it dies with the process that holds it (kill -9 included), so a stale lock needs no
detection at all. The pid written into the file is for people, never the test of liveness: an
empty or torn file just means its writer died before it finished.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
from pathlib import Path

__all__ = ["RunLockedError", "acquire", "held", "release", "state"]


class RunLockedError(RuntimeError):
    """Another live process owns this run directory."""


_HELD: dict[str, int] = {}  # resolved .lock path -> descriptor whose flock this process holds


def _key(root: Path) -> str:
    return str((root / ".lock").resolve())


def acquire(root: Path) -> bool:
    """Own `root` or raise RunLockedError naming the live owner; False when this process already did
    (re-entrant: the flow and its tasks share one process)."""
    root.mkdir(parents=True, exist_ok=True)
    lock = root / ".lock"
    key = _key(root)
    if key in _HELD:
        return False
    while True:
        fd = _open(lock, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(fd)
            os.close(fd)
            who = f"live process {owner['pid']}" if owner.get("pid") else "another live process"
            raise RunLockedError(
                f"run directory {root} is in use by {who}; wait for it, stop it, or choose another --run-id"
            ) from None
        if _same_file(fd, lock):
            break
        os.close(fd)  # the owner released (unlinked) it between our open and flock: retry on the new file
    me = json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, me, 0)
    _HELD[key] = fd
    return True


def release(root: Path) -> None:
    """Give `root` up: unlink `.lock` while still holding it (a waiter that opened the old file sees
    it is gone and retries), then close the descriptor, which releases the OS lock."""
    lock = root / ".lock"
    fd = _HELD.pop(_key(root), None)
    if fd is None:
        return
    try:
        if _same_file(fd, lock):
            lock.unlink()
    finally:
        os.close(fd)


def held(root: Path) -> bool:
    """Whether this process holds the lock of `root`."""
    return _key(root) in _HELD


def state(root: Path) -> str:
    """'free', 'stale' (a file left by a dead owner) or 'held by PID' -- for `ts check`; takes nothing."""
    lock = root / ".lock"
    if held(root):
        return f"held by {os.getpid()} (this process)"
    try:
        fd = _open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return "free"
    except RunLockedError as e:
        return f"refused: {e}"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return f"held by {_read_owner(fd).get('pid', 'an unknown process')}"
    finally:
        os.close(fd)
    return "stale"


def _open(lock: Path, flags: int) -> int:
    """The lock file, opened without following a link (it would be truncated and written: a `.lock`
    linked to any file would overwrite that file) and without blocking (a FIFO would wait for a
    writer); anything but a regular file is refused in one line (RunLockedError)."""
    fix = f"delete it (`rm {lock}`) and run again; a run's lock is only ever a plain file"
    try:  # the umask applies to a new file; never executable
        fd = os.open(lock, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunLockedError(f"{lock} is a link (to {os.path.realpath(lock)}), not a lock file: {fix}") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunLockedError(f"{lock} is not a regular file (a FIFO, device or socket), not a lock file: {fix}")
    return fd


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
