"""Resume after `kill -9`, the check shared by integration/test_resume.py (the plain loop killed in an
update) and e2e/test_resume_kill.py (killed in the seeds stage; both under Prefect).

A run killed in the middle of a stage and started again with the same run id
(a) reuses every stage that had completed -- their manifests and outputs are not rewritten -- and
(b) ends with the same policy weights, rollouts and prefixes as an uninterrupted run of the same seed.

Each case runs `tests/helpers/resume_driver.py` in its own process group, lets it block inside the
stage (at the atomic rename that would publish the stage's output), SIGKILLs the group, and re-runs
it. The uninterrupted run is the session's `tiny_run` (plain loop, in the test process, same config
and run id); a random-weights model earns no reward (zero advantages), and its entropy bonus still
moves the weights, so "same final weights" is a real check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from thinking_seeds.pipeline.policy_chain import update_output_ok
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

from . import RESUME_DRIVER
from .tiny import TINY_RUN_ID

DRIVER = RESUME_DRIVER
RUN_ID = TINY_RUN_ID  # a run's rows carry its id: the same as the reference run's


def _start(
    mode: str, overrides: list[str], env: dict, log: Path, pause: str | None = None, marker: Path | None = None
) -> subprocess.Popen:
    cmd = [sys.executable, str(DRIVER), mode, RUN_ID]
    if pause:
        cmd += ["--pause-at", pause, "--marker", str(marker)]
    cmd += [f"--set={o}" for o in overrides]
    # Own process group: SIGKILL reaches the driver and anything it started (Prefect's server).
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def _wait_for(marker: Path, proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"driver exited ({proc.returncode}) before pausing:\n{log.read_text()[-4000:]}")
        if time.monotonic() > end:
            _kill_group(proc)
            pytest.fail(f"driver did not reach the pause within {timeout}s:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)


def _completed_files(run: RunDir, redone: Path | None = None) -> dict[str, int]:
    """mtime_ns of every manifest on disk and of every file it names (a checkpoint: its manifest.json),
    but for the manifest `redone` (a stage that is not done though its manifest is there)."""
    out = {}
    for mp in sorted((run.root / "manifests").glob("iteration=*/*.json")):
        if redone is not None and mp == redone:
            continue
        out[run.rel(mp)] = mp.stat().st_mtime_ns
        for rel in json.loads(mp.read_text())["outputs"].values():
            p = run.root / rel
            p = p / "manifest.json" if p.is_dir() else p
            if p.exists():  # an update's checkpoint still being written in the background is not yet there
                out[run.rel(p)] = p.stat().st_mtime_ns
    return out


def _state(run: RunDir, step: int) -> dict[str, object]:
    """θ_step's weights and optimizer state, as tensors (safetensors' header order is not stable
    across processes, so file bytes can differ for equal contents)."""
    from safetensors import safe_open

    out = {}
    for name in ("model.safetensors", "optimizer.safetensors"):
        path = run.policy(step) / name
        if path.exists():
            with safe_open(str(path), "pt") as f:
                out[name] = ({k: f.get_tensor(k) for k in f.keys()}, f.metadata())
    return out


def _same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[n][1] == b[n][1]
        and a[n][0].keys() == b[n][0].keys()
        and all(torch.equal(a[n][0][k], b[n][0][k]) for k in a[n][0])
        for n in a
    )


def _assert_same_results(run: RunDir, ref: RunDir, iterations: int) -> None:
    for step in range(1, iterations + 1):
        assert _same_state(_state(run, step), _state(ref, step)), f"θ_{step} differs from the uninterrupted run"
    w0, wn = _state(ref, 0)["model.safetensors"][0], _state(ref, iterations)["model.safetensors"][0]
    assert any(not torch.equal(w0[k], wn[k]) for k in w0), "weights never moved: the check would be vacuous"
    for k in range(iterations):
        for path in (run.rollouts, run.prefixes):
            got, want = read_table(path(k)), read_table(getattr(ref, path.__name__)(k))
            assert got.equals(want), f"{path(k)} differs from the uninterrupted run"
    ev, ev_ref = (_results(r.metrics(iterations, "evaluate")) for r in (run, ref))
    assert ev == ev_ref  # the evaluation's results; its time/evaluate/* seconds differ from run to run


def _results(path: Path) -> list[tuple]:
    """A metrics file's rows but its timings (time/*)."""
    t = read_table(path).to_pydict()
    rows = zip(*(t[c] for c in t), strict=True)
    return [r for r in rows if not str(r[list(t).index("name")]).startswith("time/")]


def kill_and_resume(
    mode: str, pause: str, tiny_run, runs_dir: Path, env: dict, tmp_path: Path, iterations: int = 2
) -> None:
    """Run `mode` ("loop" | "flow") until it blocks at `pause` ("STAGE:K"), kill -9 its process group,
    run it again, and check (a) and (b) against `tiny_run` (a finished run of `iterations`)."""
    reference, overrides = tiny_run.run, tiny_run.overrides
    assert reference.run_id == RUN_ID
    run = RunDir.for_run(RUN_ID, runs_dir)
    marker, log = tmp_path / "paused", tmp_path / "first.log"
    proc = _start(mode, overrides, env, log, pause, marker)
    _wait_for(marker, proc, log)
    _kill_group(proc)

    stage, k = pause.split(":")
    k = int(k)
    m = run.read_manifest(k, stage)
    # An update writes its manifest before its background checkpoint is on disk: killed in that write,
    # its manifest is there but the update is not done (policy_chain.update_output_ok) and is redone.
    done = m is not None and (stage != "update" or update_output_ok(run, m, k))
    assert not done, "the killed stage must not look completed"
    before = _completed_files(run, redone=run.manifest_path(k, stage))
    assert f"manifests/iteration={k}/snapshot.json" in before  # the earlier stages of iteration k finished

    log2 = tmp_path / "second.log"
    proc = _start(mode, overrides, env, log2)
    try:
        assert proc.wait(timeout=600) == 0, log2.read_text()[-4000:]
    finally:
        _kill_group(proc)

    # (a) completed stages were skipped: nothing they wrote was touched
    after = _completed_files(run)
    changed = {p: (t, after.get(p)) for p, t in before.items() if after.get(p) != t}
    assert not changed, changed
    assert run.read_manifest(k, stage) is not None
    if mode == "flow":  # Prefect shows which stages were skipped (by their manifests) and which ran
        text = log2.read_text()
        assert "Task run 'prepare-0' - Finished in state Skipped('skipped (manifest)" in text
        assert "Task run 'snapshot-0' - Finished in state Skipped('skipped (manifest)" in text
        assert f"Task run '{stage}-{k}' - Finished in state Completed()" in text
        assert not (run.root / ".prefect-results").exists()  # the manifests are the only resume record

    # (b) the same results as a run that was never interrupted
    _assert_same_results(run, reference, iterations)
