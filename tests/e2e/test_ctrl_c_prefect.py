"""Ctrl-C of `ts train` under Prefect (issue #27, item 2; tests/e2e/test_ctrl_c.py has the plain
loop and the kill -9): SIGINT to the process group, as a terminal sends it, once the trainer and the
verifier's workers are up. One line, exit 130, within 5 s (it took 2 min 23 s), nothing left running
(Prefect's temporary server included), and the same command resumes. And the temporary server killed
under a run (issue 50, item 6): one line, exit 1, within 10 s, nothing left, the same command resumes."""

from __future__ import annotations

import re
import subprocess
import time

import psutil

from tests.e2e.test_ctrl_c import SMALL, _sets, assert_one_line_and_nothing_left, trainer_and_workers_up
from tests.helpers.interrupt import TS, interrupt_when
from thinking_seeds.store.run_dir import RunDir


def test_ctrl_c_under_prefect_is_one_line_within_5s_leaves_nothing_and_resumes(runs_dir, subprocess_env, tmp_path):
    args = ["train", "--run-id", "p", *_sets(SMALL)]

    def flow_running(cmds: list[str], text: str) -> bool:
        return trainer_and_workers_up(cmds, text) and any("uvicorn" in c for c in cmds)

    r = interrupt_when(args, flow_running, subprocess_env, tmp_path)
    assert_one_line_and_nothing_left(r, "p")
    again = subprocess.run(TS + args, env=subprocess_env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming p: " in again.stdout, again.stdout
    assert "skipped (manifest)" not in again.stdout + again.stderr  # one resume line, no line per stage


def test_the_temporary_server_killed_under_ts_train_stops_it_at_the_stage_end_in_one_line(
    runs_dir, subprocess_env, tmp_path
):
    """Issue 50, item 6: kill -9 of Prefect's temporary server in iteration 1. `ts` used to warn every 7 s,
    print a 479-line traceback after ~80 s and still be alive 120 s later; now the stage it was in ends,
    the run closes, and `ts` exits 1 within 10 s of that stage's end with one line; nothing is left; the
    same command resumes."""
    args = ["train", "--run-id", "s", *_sets([*SMALL, "iterations=4"])]
    iteration_0_done = RunDir.for_run("s").manifest_path(0, "evaluate")

    def in_iteration_1(cmds: list[str], text: str) -> bool:
        return any("uvicorn" in c for c in cmds) and iteration_0_done.exists()

    killed_at = []

    def kill_server(kids: list[psutil.Process]) -> None:
        [server] = [k for k in kids if "uvicorn" in " ".join(k.cmdline())]
        server.kill()
        killed_at.append(time.time())

    r = interrupt_when(args, in_iteration_1, subprocess_env, tmp_path, act=kill_server)
    assert r.code == 1, r.output
    # the stage it was in ends (its manifest is the newest), then the run closes and ts exits: within 10 s
    # of the stage's end, or of the kill if it came between two stages
    stage_end = max(m.stat().st_mtime for m in (runs_dir / "s" / "manifests").glob("iteration=*/*.json"))
    exited = killed_at[0] + r.seconds
    since = exited - max(stage_end, killed_at[0])
    print(f"ts exited {r.seconds:.1f} s after the kill, {exited - stage_end:.1f} s after its stage's end")
    assert since < 10.0, f"{since:.1f} s from the stage's end (or the kill) to the exit:\n{r.output}"
    assert r.seconds < 60.0, r.output  # a stage of this run lasts seconds
    errors = [line for line in r.lines if "error" in line.lower() or "warning" in line.lower() or "Traceback" in line]
    assert len(errors) == 1 and errors == r.lines[-1:], r.output
    # it names the last stage that finished: iteration 0's evaluate when the kill (right after it) comes
    # before the next task could start
    assert re.fullmatch(
        r"error: the Prefect server at http://127\.0\.0\.1:\d+/api refuses connections \(its process is gone\): "
        r"the run stopped after \w+ of iteration [0-3]; the same command resumes run s",
        errors[0],
    ), errors[0]
    assert not r.survivors, r.survivors

    again = subprocess.run(TS + args, env=subprocess_env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming s: " in again.stdout, again.stdout
    check = subprocess.run(TS + ["check", "s"], env=subprocess_env, cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0 and "run s is intact" in check.stdout, check.stdout + check.stderr
