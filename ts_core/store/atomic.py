"""Atomic file writes: a reader (or a resumed run) sees the old file or the whole new one, never half.

Every file the project publishes goes through `atomic_write` (bytes, text or a writer function) or,
for a writer that insists on a path of its own (safetensors, yaml dumpers), `atomic_path`. Both
write a temp file in the destination's folder (same file system, so os.replace is atomic), fsync
it, rename it over the destination and fsync the folder, so the rename survives a power loss. A
failure at any point, KeyboardInterrupt included, removes the temp file and leaves the old one.

Temp names are `.<name>.<random>.tmp`: a run directory's owner removes ones a killed writer left
(`RunDir.stale_temps`), and no glob for published names (step_*, *.parquet) ever matches them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["atomic_path", "atomic_write", "current_umask", "fsync_dir", "shareable"]


def current_umask() -> int:
    """The process umask, read without changing it (os.umask can only be read by setting it, which
    races with other threads creating files); falls back to the set-and-restore dance off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def shareable(path: str | os.PathLike[str], fd: int | None = None) -> None:
    """Give a file made by mkstemp (0600) or a folder made by mkdtemp (0700) the mode a plain
    open()/mkdir() would have had under the umask, so a team sharing a runs folder can read it."""
    umask = current_umask()
    if fd is not None:
        os.fchmod(fd, 0o666 & ~umask)
    elif os.path.isdir(path):
        os.chmod(path, 0o777 & ~umask)
    else:
        os.chmod(path, 0o666 & ~umask)


def fsync_dir(directory: Path) -> None:
    """Make a rename inside `directory` durable (best effort: some file systems refuse)."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside `path` to write by name; on a clean exit it replaces `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        shareable(tmp, fd)  # mkstemp makes 0600; the file gets the mode any other file would have
        os.close(fd)
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)  # looked up at call time: tests/helpers/resume_driver.py pauses a run right here
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed replace keeps the temp file; anything earlier too
        raise
    fsync_dir(path.parent)


def atomic_write(
    path: str | os.PathLike[str], content: bytes | str | Callable[[IO], object], mode: str | None = None
) -> Path:
    """Write `content` to `path` atomically and return the path.

    `content` is bytes, text (UTF-8) or a function given the open temp file (binary unless
    mode="w"), e.g. `lambda f: fig.savefig(f, format="png")` or `lambda f: pq.write_table(t, f)`.
    """
    if mode is None:
        mode = "w" if isinstance(content, str) else "wb"
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
            if callable(content):
                content(f)
            else:
                f.write(content)
    return Path(path)
