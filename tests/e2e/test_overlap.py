"""Resume after `kill -9` with pipeline.overlap on (seeds k+1 sampled while update k runs), the check
of tests/helpers/resume.py: the killed run, started again with overlap on, reuses every completed
stage and ends with the results of the uninterrupted reference run (the shared tiny run, and a
persistent-trainer run with overlap off; the switch is not in the config hash). Killed in update 0
(while seeds 1 are sampled ahead) and in seeds 1 (writing the seeds sampled ahead), with the plain
loop and under Prefect (a thread of the flow), in process and with the persistent accelerate
trainer (killed inside it).

Slow: two driver processes a case, a temporary Prefect server for the flow, a trainer launch for
accelerate. Overlap on and off, uninterrupted: integration/test_overlap.py.
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

OVERLAP = ["pipeline.overlap=true"]


def _with_overlap(reference: SimpleNamespace) -> SimpleNamespace:
    """The reference run, with the overrides of the run to kill: the same plus overlap on (set, so
    these cases hold whatever the default is)."""
    return SimpleNamespace(run=reference.run, cfg=reference.cfg, overrides=reference.overrides + OVERLAP)


def _sampled_ahead(runs_dir) -> bool:
    return RunDir.for_run(TINY_RUN_ID, runs_dir).read_manifest(1, "seeds").metrics.get("perf/seeds_ahead") == 1.0


@pytest.mark.parametrize(
    "mode, pause",
    [
        pytest.param("loop", "update:0", id="loop-kill-in-update"),
        pytest.param("loop", "seeds:1", id="loop-kill-in-seeds"),
        pytest.param("flow", "update:0", id="prefect-kill-in-update"),
        pytest.param("flow", "seeds:1", id="prefect-kill-in-seeds"),
    ],
)
def test_kill_9_then_resume_with_overlap(mode, pause, tiny_run, runs_dir, subprocess_env, tmp_path):
    kill_and_resume(mode, pause, _with_overlap(tiny_run), runs_dir, subprocess_env, tmp_path)
    assert _sampled_ahead(runs_dir), "the resumed run did not sample seeds 1 ahead: overlap was not exercised"


@pytest.fixture(scope="module")
def persistent_run(tmp_path_factory, tiny_overrides) -> SimpleNamespace:
    """The tiny run (MOVING) with the persistent trainer and overlap off, uninterrupted: the reference."""
    overrides = tiny_overrides + MOVING + ["update.launcher=accelerate", "pipeline.overlap=false"]
    cfg = load_config("tiny", overrides)
    run = train(RunDir.for_run(TINY_RUN_ID, tmp_path_factory.mktemp("persistent-reference")), cfg)
    return SimpleNamespace(run=run, cfg=cfg, overrides=overrides)


@pytest.mark.parametrize(
    "mode, pause",
    [
        pytest.param("loop", "update:0", id="loop-kill-in-trainer"),  # blocked in the trainer, at θ_1's rename
        pytest.param("flow", "update:0", id="prefect-kill-in-trainer"),
    ],
)
def test_kill_9_then_resume_with_overlap_and_the_persistent_trainer(
    mode, pause, persistent_run, runs_dir, subprocess_env, tmp_path
):
    kill_and_resume(mode, pause, _with_overlap(persistent_run), runs_dir, subprocess_env, tmp_path)
    assert _sampled_ahead(runs_dir)
    # The resumed run's trainer, launched in update 0 while seeds 1 were sampled, took update 1 too
    # (a trainer launched from a thread that ends would die with it: PR_SET_PDEATHSIG).
    resumed = RunDir.for_run(TINY_RUN_ID, runs_dir)
    assert resumed.read_manifest(1, "update").metrics["perf/trainer_reloaded"] == 0.0
