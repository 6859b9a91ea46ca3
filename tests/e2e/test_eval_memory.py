"""`ts eval RUN --data FILE --prompts 2` on a 70 KB file of 5 million rows costs what two rows cost
(issue 51: it took 2.4-6 GB when the whole file became Python lists before --prompts applied).

Under 300 MB, as a container counts it: the whole command runs in a memory cgroup limited to 300 MB
(tests/helpers/memory_cgroup.py: anonymous memory plus the page cache it cannot give back), after a
320 MB filler is OOM-killed in the same kind of cgroup (the cap bites). Skipped where no memory cgroup
can be made (not root).

The whole command -- Python, torch, transformers, the tiny model, the verifier -- peaks at ~410 MiB
on a 2-row file (its imports alone are ~380 MiB), so "under 300 MB" is measured on what the file
adds: the same command on the 5M-row file and on a 2-row file, each in a process of its own with its
data capped at 1 GiB (the old code fails it with a MemoryError), peaks measured by the kernel
(tests/helpers/memory.py); the file may add 50 MiB at most (it adds ~2). The read alone, in a bare
process, is held under 300 MiB in tests/integration/test_eval_memory.py. Slow (two interpreters that
import torch): e2e.
"""

from __future__ import annotations

import sys

import pytest

from tests.helpers import memory_cgroup
from tests.helpers.memory import many_rows_file, peak_rss_mib
from tests.helpers.tiny import copy_run


def test_eval_two_prompts_of_five_million_rows(tiny_run, tmp_path, subprocess_env):
    run = copy_run(tiny_run.run, tmp_path / "runs")
    peaks = {}
    for rows in (2, 5_000_000):
        data = many_rows_file(tmp_path / f"rows{rows}.parquet", rows)
        cmd = [sys.executable, "-m", "thinking_seeds.flows.cli", "eval", "tiny", "--data", str(data)]
        cmd += ["--prompts", "2", "--samples", "2", "--no-prefect", "-f", "json", "--runs-dir", str(run.root.parent)]
        rc, peaks[rows], out = peak_rss_mib(cmd, cap_mib=1024, env=subprocess_env)
        assert rc == 0, out[-3000:]
        assert '"prompts": 2' in out, out[-3000:]
    print(f"peak resident memory of ts eval --prompts 2: {peaks} MiB")  # shown with -s, for the record
    added = peaks[5_000_000] - peaks[2]
    assert added < 50, f"the 5M-row file added {added:.0f} MiB (peaks {peaks} MiB)"


LIMIT = 300_000_000  # bytes: "under 300 MB"
FILL = "b = bytearray(320_000_000); b[::4096] = bytes(len(b[::4096])); print(len(b))"  # every page written


def test_eval_two_prompts_of_five_million_rows_in_a_300_mb_container(tiny_run, tmp_path, subprocess_env):
    reason = memory_cgroup.available()
    if reason:
        pytest.skip(reason)
    rc, _, out = memory_cgroup.run_capped([sys.executable, "-c", FILL], LIMIT, env=subprocess_env)
    assert rc == -9, f"a 320 MB filler was not OOM-killed under the 300 MB cap (rc {rc}): {out[-500:]}"

    run = copy_run(tiny_run.run, tmp_path / "runs")
    data = many_rows_file(tmp_path / "rows.parquet", 5_000_000)
    cmd = [sys.executable, "-m", "thinking_seeds.flows.cli", "eval", "tiny", "--data", str(data), "--prompts", "2"]
    cmd += ["--samples", "2", "--no-prefect", "-f", "json", "--runs-dir", str(run.root.parent)]
    rc, peak, out = memory_cgroup.run_capped(cmd, LIMIT, env=subprocess_env)
    print(f"ts eval --prompts 2 on 5M rows: peak cgroup charge {peak / 1e6:.0f} MB (cap {LIMIT / 1e6:.0f} MB)")
    assert rc == 0, f"exit {rc} under a {LIMIT / 1e6:.0f} MB cap (-9: OOM-killed): {out[-3000:]}"
    assert '"prompts": 2' in out, out[-3000:]
    assert 0 < peak <= LIMIT
