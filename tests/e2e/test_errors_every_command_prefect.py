"""The Prefect half of tests/integration/test_errors_every_command.py: the commands that run a Prefect
flow (train, eval, report, compare), as real `ts` processes, say a user's mistake in ONE line and exit 2
(`ts report nosuchrun` printed a 25-line Prefect traceback after 11.6 s; `ts eval` on corrupt weights
91 lines)."""

from __future__ import annotations

import subprocess

from tests.helpers.interrupt import TS
from tests.integration.test_errors_every_command import cases, one_line_errors, runs_with_a_corrupt_run  # noqa: F401

PREFECT_COMMANDS = ("train", "eval", "report", "compare")


def test_every_prefect_command_says_a_mistake_in_one_line_and_exit_2(runs_with_a_corrupt_run, subprocess_env, tmp_path):  # noqa: F811
    table = cases(runs_with_a_corrupt_run, tmp_path, prefect=True)

    def run(args: list[str]) -> tuple[int, str]:
        p = subprocess.run(TS + args, env=subprocess_env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        return p.returncode, p.stdout + p.stderr

    bad = one_line_errors([case for name in PREFECT_COMMANDS for case in table[name]], run)
    assert not bad, "\n".join(bad)
