"""Resume after `kill -9` (tests/helpers/resume.py), the long cases: under Prefect (`flows.train.train_flow`,
tasks in the driver's process: Prefect shows the completed stages Skipped, by their manifests) in the
seeds and the update stage, and the plain loop killed in the seeds stage. A killed run started again
reuses every completed stage and ends with the results of an uninterrupted run. The plain loop
killed in an update, in the default suite: integration/test_resume.py.
"""

from __future__ import annotations

import pytest

from tests.helpers.resume import kill_and_resume

pytestmark = pytest.mark.slow  # two driver processes a case; under Prefect, a temporary server each: ~40 s


@pytest.mark.parametrize(
    "mode, pause",
    [
        pytest.param("loop", "seeds:1", id="loop-kill-in-seeds"),
        pytest.param("flow", "seeds:1", id="prefect-kill-in-seeds"),
        pytest.param("flow", "update:0", id="prefect-kill-in-update"),
    ],
)
def test_kill_and_resume(mode, pause, tiny_run, runs_dir, subprocess_env, tmp_path):
    kill_and_resume(mode, pause, tiny_run, runs_dir, subprocess_env, tmp_path)
