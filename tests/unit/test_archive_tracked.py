"""A comparison's archive (experiments/archive.py) exists to be committed: git must not ignore it.

`runs/` in .gitignore once matched docs/results/<id>/runs/ as well, so `ts compare --archive` wrote
files that `git add` silently skipped and a later session found no archive to restore."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("docs/results/some-comparison/runs/some-comparison-grpo-s0/archive.json", False),
        ("docs/results/some-comparison/runs/x/metrics/iteration=all/metrics.parquet", False),
        ("runs/my-run/config.yaml", True),  # the live runs folder stays out of git
    ],
)
def test_archive_is_not_ignored_by_git(path, ignored):
    res = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, capture_output=True)
    assert res.returncode in (0, 1), res.stderr
    assert (res.returncode == 0) == ignored, f"{path}: ignored={res.returncode == 0}, expected {ignored}"
