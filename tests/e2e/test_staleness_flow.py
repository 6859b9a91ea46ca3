"""Resume after `kill -9` with pipeline.max_staleness=1 (groups k+1 sampled by θ_k while update k runs:
pipeline/groups_ahead.py), the check of tests/helpers/resume.py, where the default suite does not go:

- under Prefect (the groups sampled in a thread of the flow), in process, killed in update 1 while groups 2 are sampled;
- with the persistent accelerate trainer, killed inside it (the plain loop and Prefect): the groups
  are sampled in the pipeline's process from θ_k's bytes while the trainer computes θ_{k+1}.

Each resumed run must reuse every completed stage and end with the uninterrupted run's weights,
rollouts and prefixes. Slow: two driver processes a case, a Prefect server, trainer launches.
The plain loop in process: integration/test_staleness.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers.resume import kill_and_resume
from tests.helpers.tiny import MOVING, TINY_RUN_ID
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.run_dir import RunDir

pytestmark = pytest.mark.slow

STALE = ["iterations=3", "pipeline.max_staleness=1"]


def _reference(tmp_path_factory, tiny_overrides, extra: list[str], name: str) -> SimpleNamespace:
    overrides = tiny_overrides + MOVING + STALE + extra
    cfg = load_config("tiny", overrides)
    run = train(RunDir.for_run(TINY_RUN_ID, tmp_path_factory.mktemp(name)), cfg)
    return SimpleNamespace(run=run, cfg=cfg, overrides=overrides)


@pytest.fixture(scope="module")
def stale_in_process(tmp_path_factory, tiny_overrides) -> SimpleNamespace:
    return _reference(tmp_path_factory, tiny_overrides, [], "stale-in-process")


@pytest.fixture(scope="module")
def stale_persistent(tmp_path_factory, tiny_overrides) -> SimpleNamespace:
    return _reference(tmp_path_factory, tiny_overrides, ["update.launcher=accelerate"], "stale-persistent")


def _sampled_ahead(runs_dir, k: int) -> bool:
    return RunDir.for_run(TINY_RUN_ID, runs_dir).read_manifest(k, "continuation").metrics.get("perf/sampled_ahead") == 1


def test_prefect_kill_in_update_while_sampling_ahead(stale_in_process, runs_dir, subprocess_env, tmp_path):
    kill_and_resume("flow", "update:1", stale_in_process, runs_dir, subprocess_env, tmp_path, iterations=3)
    assert _sampled_ahead(runs_dir, 1), "groups 1 were not sampled ahead beside update 0 in the flow"


@pytest.mark.parametrize("mode", ["loop", "flow"])
def test_kill_in_the_persistent_trainer_while_sampling_ahead(
    mode, stale_persistent, runs_dir, subprocess_env, tmp_path
):
    assert all(stale_persistent.run.read_manifest(k, "continuation").metrics["perf/sampled_ahead"] for k in (1, 2))
    kill_and_resume(mode, "update:1", stale_persistent, runs_dir, subprocess_env, tmp_path, iterations=3)
