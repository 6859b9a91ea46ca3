"""Resume after `kill -9` of the plain loop (`thinking_seeds.pipeline.loop.train`) in an update: the
completed stages are reused, and the results equal an uninterrupted run's (tests/helpers/resume.py).
The plain loop killed in the seeds stage, and both stages under Prefect: e2e/test_resume_kill.py."""

from __future__ import annotations

import pytest

from tests.helpers.resume import kill_and_resume


@pytest.mark.parametrize("mode, pause", [pytest.param("loop", "update:1", id="loop-kill-in-update")])
def test_kill_and_resume(mode, pause, tiny_run, runs_dir, subprocess_env, tmp_path):
    kill_and_resume(mode, pause, tiny_run, runs_dir, subprocess_env, tmp_path)
