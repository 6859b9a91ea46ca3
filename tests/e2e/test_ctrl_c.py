"""Ctrl-C and kill -9 of `ts train`, as a terminal and a user send them (issue #27, item 2).

Ctrl-C: the terminal sends SIGINT to the whole foreground process group. `ts` must be back within 5 s
with one line and exit code 130, leave no process running (the verifier's spawned workers, the
persistent trainer, Prefect's temporary server), and the same command must resume the run. Before,
the SIGINT also reached the trainer, the workers (a 20-line SpawnProcess traceback each) and the Prefect
server (then 2.5 minutes of retries to report the crash to it).

kill -9 of the main process alone, as soon as it started Prefect's temporary server (before the run's
lock, where the child guard used to start): nothing may be left behind (it used to leave the server,
189 MB, holding its port).

The Prefect-mode Ctrl-C costs a flow's start-up: tests/e2e/test_ctrl_c_prefect.py.
"""

from __future__ import annotations

import re

from tests.helpers.interrupt import interrupt_when

# The tiny preset's own model (it writes answers: the verifier's workers start at the θ_0 evaluation,
# which the random test model's answers do not need) on a small budget, with the persistent trainer
# (the default launcher): every kind of child a run has.
SMALL = [
    *("iterations=2", "rollout.prompts_per_iteration=4", "data.train_size=50", "data.val_size=8"),
    *("data.test_size=8", "eval.prompts=4", "eval.samples=4", "update.launcher=accelerate"),
]


def _sets(overrides: list[str]) -> list[str]:
    return [x for o in overrides for x in ("--set", o)]


def trainer_and_workers_up(cmds: list[str], text: str) -> bool:
    """The trainer group launched and the verifier's workers spawned (the θ_0 evaluation scores)."""
    return any("trainer_server" in c for c in cmds) and any("spawn_main" in c for c in cmds)


def assert_one_line_and_nothing_left(r, run_id: str) -> None:
    assert r.code == 130, r.output
    assert r.seconds < 5.0, f"{r.seconds:.1f} s to exit after Ctrl-C"
    assert r.lines == [f"error: interrupted (Ctrl-C); the same command resumes run {run_id}"], r.output
    assert not r.survivors, r.survivors


def test_ctrl_c_without_prefect_is_one_line_within_5s_leaves_nothing_and_resumes(runs_dir, subprocess_env, tmp_path):
    args = ["train", "--run-id", "c", "--no-prefect", *_sets(SMALL)]
    r = interrupt_when(args, trainer_and_workers_up, subprocess_env, tmp_path)
    assert_one_line_and_nothing_left(r, "c")
    # The same command resumes: it says so in one line (interrupted again there, as soon as it has)
    r = interrupt_when(args, lambda cmds, text: "continuing at" in text, subprocess_env, tmp_path)
    assert r.code == 130
    assert re.search(r"^resuming c: \d+ stages? done, continuing at ", r.before, re.M), r.before


def test_kill_9_right_after_the_prefect_server_starts_leaves_no_process(runs_dir, subprocess_env, tmp_path):
    def server_starting(cmds: list[str], text: str) -> bool:
        return any("uvicorn" in c for c in cmds)  # the server process exists: it may not be up yet

    args = ["train", "--run-id", "k", *_sets(SMALL)]
    r = interrupt_when(args, server_starting, subprocess_env, tmp_path, kill_main=True)
    assert r.code == -9
    assert not r.survivors, r.survivors
