"""The package stands on its own: a wheel built from the checkout, installed into a fresh venv
outside it, trains the tiny preset (presets and the bundled model come as package data)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert out.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out


def test_wheel_outside_the_checkout_trains_the_tiny_preset(tmp_path):
    wheels = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)])
    (whl,) = wheels.glob("thinking_seeds-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    # The dependencies (torch, transformers, prefect, ...) come from this environment's site-packages,
    # added as a plain path: its .pth files (our editable install's finder among them) are NOT run,
    # so `thinking_seeds` can only come from the wheel.
    site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(whl)])
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", TS_RUNS_DIR=str(work / "runs"))
    where = run(
        [
            str(py),
            "-c",
            "import thinking_seeds, thinking_seeds.assets as a; print(thinking_seeds.__file__); print(a.PRESETS_DIR)",
        ],
        cwd=work,
        env=env,
    ).stdout.split()
    assert all(str(venv) in w for w in where), f"imported from outside the wheel: {where}"
    run(
        [
            str(venv / "bin" / "ts"),
            "train",
            "--preset",
            "tiny",
            "--run-id",
            "wheel",
            "--set",
            "iterations=1",
            "--set",
            "eval.every=1",
        ],
        cwd=work,
        env=env,
    )
    assert (work / "runs" / "wheel" / "metrics").is_dir()
