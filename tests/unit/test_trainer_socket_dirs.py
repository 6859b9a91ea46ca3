"""The trainer's socket folder lives outside the run (a Unix socket's path is short), named by the run and
the pipeline's pid: a folder whose pipeline died (kill -9) is removed at the run's next start, never
another run's, never a live process's."""

import subprocess
import sys
import tempfile
from pathlib import Path

from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.transports.trainer_socket import remove_stale_socket_dirs, socket_dir


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_dead_pipelines_folder_goes_at_the_next_start_and_nothing_else(tmp_path):
    run, other = RunDir.for_run("a", tmp_path), RunDir.for_run("b", tmp_path)
    mine = socket_dir(run)  # this (live) process's
    tag = mine.name.split("-")[2]
    stale = Path(tempfile.mkdtemp(prefix=f"ts-trainer-{tag}-{_dead_pid()}-"))
    (stale / "sock").write_text("")  # what kill -9 leaves: a dead socket, an empty log
    theirs = socket_dir(other)
    other_stale = Path(tempfile.mkdtemp(prefix=f"ts-trainer-{theirs.name.split('-')[2]}-{_dead_pid()}-"))
    try:
        again = socket_dir(run)  # the run starts again
        assert not stale.exists()
        assert mine.exists() and again.exists() and theirs.exists() and other_stale.exists()
        assert remove_stale_socket_dirs(other) == [other_stale]
    finally:
        for d in (mine, again, theirs, stale, other_stale):
            subprocess.run(["rm", "-rf", str(d)], check=False)
