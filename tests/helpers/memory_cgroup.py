"""A command run in a memory cgroup of its own: what a container with that memory limit would let it use.

The kernel charges a cgroup with the anonymous memory its processes fill (heap, tensors, Python objects)
and the page cache they bring in; past the limit it reclaims the cgroup's cache, and when only anonymous
memory is left it OOM-kills. So "runs under a 300 MB limit" is the kernel's own measure of what the
command costs, shared library code included only as far as it cannot be reclaimed. Resident-set figures
count the ~140 MB of torch and transformers code mapped from files, which a container does not have to
hold; RLIMIT_DATA counts address space torch reserves and never touches.

Needs a writable memory controller (root, or a delegated cgroup): cgroup v1's memory hierarchy or cgroup
v2 with the memory controller. `available()` says why not, for a skip.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


def _v2_ok() -> bool:
    controllers = V2 / "cgroup.subtree_control"
    return controllers.is_file() and "memory" in controllers.read_text().split()


def available() -> str | None:
    """None when a memory cgroup can be made here; otherwise why not (a skip reason)."""
    if V1.is_dir() and (V1 / "memory.limit_in_bytes").exists() and os.access(V1, os.W_OK):
        return None
    if _v2_ok() and os.access(V2, os.W_OK):
        return None
    return "no writable memory cgroup here (needs root or a delegated cgroup with the memory controller)"


def run_capped(cmd: list[str], limit_bytes: int, **run) -> tuple[int, int, str]:
    """(exit code, the cgroup's peak charge in bytes, stdout + stderr) of `cmd` run in a fresh memory cgroup
    limited to `limit_bytes` (no swap). An OOM kill shows as exit code -9."""
    v1 = available() is None and V1.is_dir() and (V1 / "memory.limit_in_bytes").exists()
    group = (V1 if v1 else V2) / f"ts-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        if v1:
            (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
            if (group / "memory.memsw.limit_in_bytes").exists():  # no swapping around the limit
                (group / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        else:
            (group / "memory.max").write_text(str(limit_bytes))
            (group / "memory.swap.max").write_text("0")
        procs = str(group / "cgroup.procs")

        def enter() -> None:  # in the child, before exec: the command is in the cgroup from its first page
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        res = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=enter, check=False, **run
        )
        peak_file = group / ("memory.max_usage_in_bytes" if v1 else "memory.peak")
        peak = int(peak_file.read_text()) if peak_file.exists() else -1
        return res.returncode, peak, res.stdout.decode(errors="replace")
    finally:
        group.rmdir()
