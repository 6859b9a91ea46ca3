"""The run directory lock: a live owner is refused with a clear error, a dead owner's lock is taken over."""

import json
import os
import subprocess
import sys

import pytest

from ts_core.run_dir import RunDir


def test_a_pid_in_the_lock_file_is_not_ownership(tmp_path):
    """Only the OS lock counts: a file naming a live process that does not hold the lock (a reused
    pid, an old-format lock) is stale and taken over. Live owners: tests/test_faults_lock.py."""
    run = RunDir.for_run("r", tmp_path)
    run.root.mkdir(parents=True)
    import socket

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (run.root / ".lock").write_text(json.dumps({"pid": live.pid, "host": socket.gethostname()}))
        run.acquire_lock()
        assert json.loads((run.root / ".lock").read_text())["pid"] == os.getpid()
        run.release_lock()
        assert not (run.root / ".lock").exists()
    finally:
        live.kill()
        live.wait()


def test_run_id_must_be_a_plain_name(tmp_path):
    with pytest.raises(ValueError, match="plain name"):
        RunDir.for_run("../x", tmp_path)
