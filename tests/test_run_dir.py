"""The run directory lock: a live owner is refused with a clear error, a dead owner's lock is taken over."""

import json
import os
import subprocess
import sys

import pytest

from ts_core.run_dir import RunDir, RunLockedError


def test_live_lock_is_refused_and_stale_lock_taken_over(tmp_path):
    run = RunDir.for_run("r", tmp_path)
    run.root.mkdir(parents=True)
    import socket

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (run.root / ".lock").write_text(json.dumps({"pid": live.pid, "host": socket.gethostname()}))
        with pytest.raises(RunLockedError, match=f"in use by live process {live.pid}"):
            run.acquire_lock()
    finally:
        live.kill()
        live.wait()
    # The owner is dead now: its lock is stale and ours to take.
    run.acquire_lock()
    assert json.loads((run.root / ".lock").read_text())["pid"] == os.getpid()
    run.release_lock()
    assert not (run.root / ".lock").exists()


def test_run_id_must_be_a_plain_name(tmp_path):
    with pytest.raises(ValueError, match="plain name"):
        RunDir.for_run("../x", tmp_path)
