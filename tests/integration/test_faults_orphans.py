"""Orphans (issue #11, item 4): a kill -9 of the main process alone (not its group) must not leave its
children running -- the verifier's workers, the resource tracker, a server it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.helpers import REPO

# The owner of a run with the children a real run has: verifier workers (spawned, with the resource
# tracker) and a long-lived subprocess standing in for Prefect's temporary server.
_OWNER = r"""
import subprocess, sys, time
from pathlib import Path
from thinking_seeds.data.rewards import Verifier
from thinking_seeds.store.run_dir import RunDir

if __name__ == "__main__":
    RunDir(Path(sys.argv[1])).acquire_lock()
    v = Verifier(backend="math_verify", workers=2)
    v._get_pool()
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    time.sleep(1.5)  # the guard has seen them all
    print(" ".join(map(str, v.worker_pids + [server.pid])), flush=True)
    time.sleep(300)
"""


def _descendants(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        try:
            ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]) if d.isdigit() else None
        except OSError:
            continue
        if ppid is not None:
            kids.setdefault(ppid, []).append(int(d))
    out, todo = set(), [root]
    while todo:
        for p in kids.get(todo.pop(), []):
            out.add(p)
            todo.append(p)
    return out


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_children_die_when_the_main_process_is_killed_alone(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(_OWNER)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    owner = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        named = [int(x) for x in owner.stdout.readline().split()]
        assert len(named) == 3, named
        children = _descendants(owner.pid)  # workers, server, resource tracker, the guard
        assert set(named) <= children
        os.kill(owner.pid, signal.SIGKILL)  # the main process only, not its group
        owner.wait()
        deadline = time.time() + 20
        while time.time() < deadline and any(_alive(p) for p in children):
            time.sleep(0.2)
        left = [p for p in children if _alive(p)]
        assert not left, [open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:100] for p in left]
    finally:
        try:
            os.killpg(owner.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
