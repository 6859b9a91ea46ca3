"""The comparison's job runner: runs in subprocesses, a failed run is reported (with its log's tail)
and the others keep going."""

from __future__ import annotations

import sys

import pytest

from thinking_seeds.experiments.jobs import CompareError, Job, raise_on_failures, run_jobs


def test_run_jobs_reports_failures_and_keeps_going(tmp_path):
    ok = [sys.executable, "-c", "print('fine')"]
    bad = [sys.executable, "-c", "import sys; print('no Hugging Face checkpoint at /x'); sys.exit(3)"]
    jobs = [
        Job("a", ok, tmp_path / "a" / "train.log"),
        Job("b", bad, tmp_path / "b" / "train.log"),
        Job("c", ok, tmp_path / "c" / "train.log"),
        Job("d", ok, tmp_path / "d" / "train.log", done=True),
    ]
    res = run_jobs(jobs, tmp_path, parallel=2, poll=0.05)
    assert [(r.run_id, r.status, r.returncode) for r in res] == [
        ("a", "done", 0),
        ("b", "failed", 3),
        ("c", "done", 0),
        ("d", "skipped", 0),
    ]
    assert not (tmp_path / "d").exists()  # a complete job starts no process
    assert "fine" in (tmp_path / "c" / "train.log").read_text()
    with pytest.raises(CompareError) as e:
        raise_on_failures(res)
    assert "1 of 4 runs failed" in str(e.value) and str(tmp_path / "b" / "train.log") in str(e.value)
    assert "no Hugging Face checkpoint" in str(e.value)  # the log's tail names the cause
