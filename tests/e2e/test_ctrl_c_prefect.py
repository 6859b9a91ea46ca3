"""Ctrl-C of `ts train` under Prefect (issue #27, item 2; tests/e2e/test_ctrl_c.py has the plain
loop and the kill -9): SIGINT to the process group, as a terminal sends it, once the trainer and the
verifier's workers are up. One line, exit 130, within 5 s (it took 2 min 23 s), nothing left running
(Prefect's temporary server included), and the same command resumes."""

from __future__ import annotations

import subprocess

from tests.e2e.test_ctrl_c import SMALL, _sets, assert_one_line_and_nothing_left, trainer_and_workers_up
from tests.helpers.interrupt import TS, interrupt_when


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
