"""A full disk during `ts train` and `ts export` ends in one line (issue #51, item 6): which path, that
nothing written before was lost, that the same command resumes -- and it does, once there is room.

The disk is a small tmpfs mounted in a private mount namespace (`unshare -m`, with `-r` when not root);
where the namespace or the mount is refused (a container without user namespaces), the test skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def _unshare() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` here: cannot mount a small tmpfs")
    args = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    probe = subprocess.run(
        [*args, "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d; rmdir $d"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace here: {probe.stderr.strip()[:200]}")
    return args


def _in_namespace(script: str, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*_unshare(), "bash", "-c", script], capture_output=True, text=True, env=env, timeout=timeout)


def _ts() -> str:
    return f"{sys.executable} -m thinking_seeds.flows.cli"


def test_train_on_a_full_disk_says_so_in_one_line_and_resumes_with_room(tmp_path, tiny_overrides, subprocess_env):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    sets = " ".join(f"--set {o}" for o in tiny_overrides)
    train = f"{_ts()} train --run-id full --no-prefect --runs-dir {mnt} {sets}"
    script = f"""
        set -u
        mount -t tmpfs -o size=400k tmpfs {mnt}
        {train} > {tmp_path}/first.out 2> {tmp_path}/first.err; echo $? > {tmp_path}/first.rc
        mount -o remount,size=200m {mnt}
        {train} > {tmp_path}/second.out 2> {tmp_path}/second.err; echo $? > {tmp_path}/second.rc
    """
    res = _in_namespace(script, subprocess_env)
    assert res.returncode == 0, res.stderr
    err = (tmp_path / "first.err").read_text()
    lines = [x for x in err.splitlines() if x.strip().startswith("error:")]  # after the progress lines
    assert (tmp_path / "first.rc").read_text().strip() == "2", err
    assert len(lines) == 1 and err.rstrip().endswith(lines[0]) and "Traceback" not in err, err
    assert "disk is full" in lines[0] and str(mnt) in lines[0] and "resumes" in lines[0], lines[0]
    second = (tmp_path / "second.err").read_text()
    assert (tmp_path / "second.rc").read_text().strip() == "0", second + (tmp_path / "second.out").read_text()
    assert "resum" in (tmp_path / "second.out").read_text()  # it went on from what the first one wrote


def test_export_on_a_full_disk_says_so_in_one_line_and_leaves_nothing(tmp_path, tiny_run, subprocess_env):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    runs = tiny_run.run.root.parent
    out = mnt / "model"
    script = f"""
        mount -t tmpfs -o size=64k tmpfs {mnt}
        {_ts()} export {tiny_run.run.run_id} --out {out} --runs-dir {runs} > {tmp_path}/out 2> {tmp_path}/err
        echo $? > {tmp_path}/rc
        ls -A {mnt} > {tmp_path}/left
    """
    res = _in_namespace(script, subprocess_env)
    assert res.returncode == 0, res.stderr
    err = (tmp_path / "err").read_text()
    lines = [x for x in err.splitlines() if x.strip()]
    assert (tmp_path / "rc").read_text().strip() == "2" and len(lines) == 1 and "Traceback" not in err, err
    assert "disk is full" in lines[0] and str(out) in lines[0] and "ts export" in lines[0], lines[0]
    assert (tmp_path / "left").read_text().strip() == ""  # no hidden half-copy beside --out


def test_a_runs_dir_entry_this_user_may_not_read_is_one_line(request, subprocess_env):
    """`ts runs` over a runs folder holding an entry the user may not enter (PermissionError): one line."""
    top = Path(tempfile.mkdtemp(prefix="ts-perm-"))  # pytest's own tmp folders are 0700: another user is stopped there
    request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    runs = top / "runs"
    (runs / "theirs" / "metrics").mkdir(parents=True)
    (runs / "mine").mkdir()
    (runs / "mine" / "config.yaml").write_text("seed: 0\n")
    os.chmod(runs / "theirs", 0)
    for p in (top, runs, runs / "mine"):
        os.chmod(p, 0o755)
    cmd = [sys.executable, "-m", "thinking_seeds.flows.cli", "runs", "--runs-dir", str(runs)]
    if os.geteuid() == 0:  # root reads anything: run it as nobody
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no user here that a folder's permissions stop")
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env, timeout=300)
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "theirs" in lines[0] and "permission" in lines[0].lower(), lines[0]
