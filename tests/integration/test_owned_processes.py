"""What a command starts ends with it, on the error paths too: the jobs of a comparison run in this
process (`ts compare --no-prefect`) when the supervisor is killed, the hidden folder of a failed
`ts export`, and a run's background compaction before the run lets go of its directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from thinking_seeds.pipeline import export


def _gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_kill_9_of_a_comparisons_supervisor_ends_its_jobs(tmp_path):
    """Each job runs in its own session (a terminal's Ctrl-C reaches only the supervisor), so nothing but
    the supervisor's guard stops a job whose supervisor was killed: it used to train on, holding its run's
    lock and its GPU, until it ended."""
    driver = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from thinking_seeds.experiments.jobs import Job, run_jobs
        root = Path({str(tmp_path)!r})
        job = Job("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"], root / "job.log")
        run_jobs([job], root, parallel=1)
    """)
    sup = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        me, deadline = psutil.Process(sup.pid), time.monotonic() + 60
        while not (jobs := [p for p in me.children() if "time.sleep(120)" in " ".join(p.cmdline())]):
            assert time.monotonic() < deadline and sup.poll() is None, "the job never started"
            time.sleep(0.2)
        time.sleep(1.0)  # the guard notes the process's descendants twice a second
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
        assert _gone_within(jobs[0].pid, 10.0), "the job outlived its supervisor"
    finally:
        for p in psutil.Process().children(recursive=True):
            if "time.sleep(120)" in " ".join(p.cmdline()):
                p.kill()


def test_a_failed_export_leaves_no_hidden_folder(tiny_run, tmp_path, monkeypatch):
    def broken(*a, **k):
        raise OSError("no space left on device")

    monkeypatch.setattr(export, "_card", broken)  # after the weights are copied into the hidden folder
    with pytest.raises(OSError, match="no space left"):
        export.export_policy(tiny_run.run, None, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_runs_close_waits_for_its_background_compaction(tmp_path, monkeypatch):
    from thinking_seeds.pipeline.run_resources import close_resources, resources_for
    from thinking_seeds.store import compaction
    from thinking_seeds.store.run_dir import RunDir

    done: list[int] = []

    def slow_compact(run_dir, blocks, started):  # a block of a long run: seconds of DuckDB
        time.sleep(1.0)
        done.extend(blocks)

    monkeypatch.setattr(compaction, "compact", slow_compact)
    run = RunDir(tmp_path / "r")
    resources_for(run)
    thread = compaction.compact_behind(run.root, compaction.BLOCK)
    close_resources(run)  # the run's normal end: it used to exit with the part half-written
    assert done == [0] and not thread.is_alive()
