"""Memory measured from outside: a child process's peak resident memory under an address-space cap, and
the small Parquet file of millions of rows that once cost gigabytes (issue 51).

The peak comes from the kernel (wait4's ru_maxrss for that one process), not from timing or sampling;
the cap (RLIMIT_DATA) makes a regression fail fast with a MemoryError instead of taking a shared machine's RAM.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

LAUNCHER = Path(__file__).with_name("peak_rss.py")


def peak_rss_mib(cmd: list[str], cap_mib: int | None = None, **run) -> tuple[int, float, str]:
    """(exit code, peak resident memory in MiB, stdout + stderr) of `cmd`, run with its data capped at
    `cap_mib` (None: no cap), through tests/helpers/peak_rss.py (why: its docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        launcher = [sys.executable, "-S", str(LAUNCHER), str(peak), str(cap_mib or 0)]
        res = subprocess.run(launcher + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, **run)
        kib = int(peak.read_text()) if peak.is_file() else 0
    return res.returncode, kib / 1024, res.stdout.decode(errors="replace")


def many_rows_file(path: Path, rows: int = 5_000_000, row_group: int = 1_000_000) -> Path:
    """A verl-schema Parquet file of `rows` copies of one prompt ('1+1=', answer 2): ~70 KB on disk for
    5 million rows (dictionary-encoded), gigabytes once every row is a Python object."""
    row = {
        "data_source": "gsm8k",
        "prompt": [{"role": "user", "content": "1+1="}],
        "reward_model": {"style": "rule", "ground_truth": "2"},
    }
    one = pa.Table.from_pylist([row])
    block = one.take(pa.repeat(pa.scalar(0, pa.int32()), min(rows, row_group)))
    with pq.ParquetWriter(path, block.schema) as w:
        for start in range(0, rows, row_group):
            w.write_table(block.slice(0, min(row_group, rows - start)))
    return path
