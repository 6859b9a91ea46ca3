"""`ts eval RUN --data FILE --prompts 2` on a 70 KB file of 5 million rows costs what two rows cost
(issue 51: it took 2.4-6 GB when the whole file became Python lists before --prompts applied).

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
