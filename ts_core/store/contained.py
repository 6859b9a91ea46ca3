"""A run directory from anywhere stays inside itself (docs/security.md, "An untrusted run directory").

Runs are copied between people, so every path a run names -- in a stage manifest, a checkpoint
manifest, a folder of the run -- is data from someone else. Before anything is read, hashed, set
aside or deleted through such a path:

- `inside(root, path)`: the path, links resolved, must lie in the run's own folder (links resolved
  too); `../../victim`, an absolute path and a link that leads out are refused in one line;
- `open_regular(path)`: a file is opened without following a final link and without blocking
  (a FIFO would wait forever for a writer), and must be a regular file: /dev/zero, a FIFO or a
  socket is refused;
- `bounded_hash(path)`: sha256 streamed from such a file, refused above TS_MAX_FILE_GB (default 64)
  so a 100 GB sparse file costs a stat, not an hour.

The errors are DataError (a ValueError): `ts` prints them as one line and exits 2.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

from thinking_seeds.store.data_error import DataError

__all__ = [
    "MAX_FILE_GB_ENV",
    "RUN_FOLDERS",
    "OutsideRunError",
    "bounded_hash",
    "inside",
    "link_out",
    "max_file_bytes",
    "open_regular",
    "read_small",
]

MAX_FILE_GB_ENV = "TS_MAX_FILE_GB"
_DEFAULT_MAX_FILE_GB = 64.0  # above the largest single weights file a run writes (a 14B model's fp32 shard)
_CHUNK = 1 << 20


# A run directory's own folders (store/run_dir.py): one that is a link leading out of the run is refused
# before its owner sweeps, sets aside or prunes anything (a `policy` linked elsewhere would have its
# steps deleted there), and `ts check` names it.
RUN_FOLDERS = (
    *("data", "policy", "checkpoints", "corpus", "rollouts", "metrics", "manifests", "reports", "evals", "compacted"),
)


class OutsideRunError(DataError):
    """A path a run names leads outside the run directory (traversal, an absolute path, a link out)."""


def max_file_bytes() -> int:
    """The largest file the project hashes or reads whole: TS_MAX_FILE_GB gigabytes (default 64)."""
    raw = os.environ.get(MAX_FILE_GB_ENV, "")
    try:
        gb = float(raw) if raw else _DEFAULT_MAX_FILE_GB
    except ValueError:
        raise DataError(f"{MAX_FILE_GB_ENV}={raw!r} is not a number of gigabytes; set it like 64 or 0.5") from None
    if not gb > 0:
        raise DataError(f"{MAX_FILE_GB_ENV}={raw!r} must be a positive number of gigabytes")
    return int(gb * (1 << 30))


def inside(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """`root / path` (an absolute `path` is taken as is, as Path does), or OutsideRunError when it --
    every link on the way resolved -- is not inside `root` (its own links resolved too).

    Returns the path unresolved (the run's own name for it: messages and manifests keep it)."""
    root = Path(root)
    p = root / path
    real_root = os.path.realpath(root)
    real = os.path.realpath(p)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        why = "is a link that leads" if os.path.realpath(os.path.abspath(p)) != os.path.abspath(p) else "lies"
        raise OutsideRunError(
            f"{os.fspath(path)!r} named in run directory {root} {why} outside it (to {real}); a run never names "
            "files outside itself, so this run directory was altered: nothing was read or changed through it; "
            "do not resume or export it (copy the run again from its source, or remove what names that path)"
        )
    return p


def link_out(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> str | None:
    """Why `root / path` leads out of `root` (the OutsideRunError's line), or None when it stays in."""
    try:
        inside(root, path)
    except OutsideRunError as e:
        return str(e)
    return None


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """A descriptor of the regular file `path`, opened without following a final link (ELOOP) and
    without blocking (a FIFO); a link, a device, a FIFO or a socket is refused (DataError)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:  # the final component is a symbolic link
            raise DataError(
                f"{os.fspath(path)} is a symbolic link (to {os.path.realpath(path)}), where a file of its own is "
                "expected; it is not followed: replace the link with the file"
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise DataError(
            f"{os.fspath(path)} is {kind}, not a regular file; it is not read: replace it with the file it should be"
        )
    return fd


def read_small(path: str | os.PathLike[str], limit: int = 64 << 20) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (a manifest, a small JSON), opened as
    `open_regular` does; DataError (one line) for a link, a special file or a larger file."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise DataError(f"{os.fspath(path)} is {size} bytes, more than the {limit} it may have; it is not read")
        return os.pread(fd, limit + 1, 0)[:limit]
    finally:
        os.close(fd)


def bounded_hash(path: str | os.PathLike[str], *, follow: bool = False) -> str:
    """sha256 hex digest of a regular file, streamed; refused (DataError, one line) for a link (unless
    `follow`: a user's own input may be one), a special file, or a file above max_file_bytes()."""
    target = os.path.realpath(path) if follow else path
    fd = open_regular(target)
    limit = max_file_bytes()
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise DataError(
                f"{os.fspath(path)} is {size / (1 << 30):.1f} GB, over the {limit / (1 << 30):g} GB a file may be "
                f"({MAX_FILE_GB_ENV}); it is not read: raise {MAX_FILE_GB_ENV} if the file is really this large"
            )
        h = hashlib.sha256()
        read = 0
        while chunk := os.read(fd, _CHUNK):
            read += len(chunk)
            if read > limit:  # it grew while it was read
                raise DataError(f"{os.fspath(path)} grew past {limit / (1 << 30):g} GB as it was read")
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)
