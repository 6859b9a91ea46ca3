"""Fault injection on the run directory: races for the lock, stale temp files, umask (issue #11, items 2, 4, 6).

The race tests start many processes that all try to own one run at the same wall-clock instant;
exactly one may win, on a fresh run and on every kind of stale lock (a dead owner's, an empty one).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO
from thinking_seeds.store.run_dir import RunDir, RunLockedError

RACERS = 12

# Each racer imports, says it is ready, and waits for the start instant (the same for all, sent once
# every racer is ready); then it tries to own the run and reports. The winner holds the lock until
# every racer has reported, so every loser's attempt overlaps it.
_RACER = r"""
import sys, time
from pathlib import Path
from thinking_seeds.store.run_dir import RunDir, RunLockedError
run = RunDir(Path(sys.argv[1]))
print("ready", flush=True)
start = float(sys.stdin.readline())
time.sleep(max(0.0, start - time.time()))
try:
    run.acquire_lock()
except RunLockedError:
    print("refused", flush=True)
    sys.exit(0)
print("owner", flush=True)
sys.stdin.readline()  # until the test has every racer's answer
run.release_lock()
"""


def _race(root: Path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for _ in range(RACERS)
    ]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                p.wait(timeout=60)
                pytest.fail(f"a racer failed before the start (exit {p.returncode}):\n{p.stderr.read()[-3000:]}")
        start = time.time() + 0.5  # every racer is waiting: well within half a second, all have it
        for p in procs:
            p.stdin.write(f"{start!r}\n")
            p.stdin.flush()
        outs = [p.stdout.readline().strip() for p in procs]
        for p in procs:
            p.stdin.close()  # releases the owner
            p.wait(timeout=60)
            assert p.returncode == 0, p.stderr.read()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("stale", ["fresh", "empty", "dead_owner", "torn"])
def test_many_simultaneous_starts_have_exactly_one_owner(tmp_path, stale):
    import socket

    run = RunDir.for_run("race", tmp_path)
    run.root.mkdir(parents=True)
    lock = run.root / ".lock"
    if stale == "empty":
        lock.write_text("")
    elif stale == "dead_owner":
        lock.write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname()}))
    elif stale == "torn":
        lock.write_text('{"pid": 12')
    outs = _race(run.root)
    assert outs.count("owner") == 1, outs
    assert outs.count("refused") == RACERS - 1, outs


def test_live_owner_refused_then_taken_over_when_it_dies(tmp_path):
    run = RunDir.for_run("r", tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; from pathlib import Path; from thinking_seeds.store.run_dir import RunDir; "
            "RunDir(Path(sys.argv[1])).acquire_lock(); print('held', flush=True); time.sleep(60)",
            str(run.root),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"in use by live process {holder.pid}"):
            run.acquire_lock()
    finally:
        holder.kill()  # kill -9: no release, the lock file stays behind
        holder.wait()
    assert (run.root / ".lock").exists()
    run.acquire_lock()
    assert json.loads((run.root / ".lock").read_text())["pid"] == os.getpid()
    run.release_lock()
    assert not (run.root / ".lock").exists()


def test_a_pid_in_the_lock_file_is_not_ownership(tmp_path):
    """Only the OS lock counts: a file naming a live process that does not hold the lock (a reused
    pid, an old-format lock) is stale and taken over."""
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


def test_takeover_removes_what_a_killed_writer_left(tmp_path):
    """A kill -9 in the middle of writes leaves temp files and folders; the next owner removes them."""
    run = RunDir.for_run("r", tmp_path)
    left = [
        run.root / "policy" / ".tmp_step_000003_abcd" / "model.safetensors",
        run.root / "checkpoints" / ".old_step_000002_x" / "step_000002" / "config.json",
        run.root / "rollouts" / "iteration=2" / ".rollouts.parquet.k3j2.tmp",
        run.root / "manifests" / "iteration=2" / "verify.json.tmp",
        run.root / "config.yaml.tmp",
    ]
    keep = [run.root / "rollouts" / "iteration=2" / "rollouts.parquet", run.root / "config.yaml"]
    for p in left + keep:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    run.acquire_lock()
    try:
        for p in left:
            assert not p.exists(), p
        assert not (run.root / "policy" / ".tmp_step_000003_abcd").exists()
        assert not (run.root / "checkpoints" / ".old_step_000002_x").exists()
        for p in keep:
            assert p.exists(), p
    finally:
        run.release_lock()


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_files_and_folders_respect_the_umask(tmp_path, umask, tiny_model_dir):
    import pyarrow as pa

    from thinking_seeds.engine.models import load_model
    from thinking_seeds.store.checkpoints import save_checkpoint
    from thinking_seeds.store.parquet_io import write_table_atomic

    model, tok = load_model(tiny_model_dir)
    old = os.umask(umask)
    try:
        run = RunDir.for_run("u", tmp_path)
        run.acquire_lock()
        table_path = write_table_atomic(pa.table({"a": [1]}), run.root / "x" / "t.parquet")
        ckpt = save_checkpoint(model, tok, run.policy_root, 0)
        lock_mode = stat.S_IMODE((run.root / ".lock").stat().st_mode)
        run.release_lock()
    finally:
        os.umask(old)
    file_mode, dir_mode = 0o666 & ~umask, 0o777 & ~umask
    assert stat.S_IMODE(table_path.stat().st_mode) == file_mode
    assert lock_mode == file_mode  # never executable
    assert stat.S_IMODE(ckpt.stat().st_mode) == dir_mode
    for f in ckpt.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == file_mode, f
