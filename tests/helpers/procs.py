"""The processes of this machine whose command line contains a text (Linux /proc): how the kill -9
tests check that no child outlived the process that was killed."""

from __future__ import annotations

from pathlib import Path


def procs_with(text: str) -> list[int]:
    """PIDs whose /proc/<pid>/cmdline contains `text` (processes that end while we read are skipped)."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if text in (p / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids
