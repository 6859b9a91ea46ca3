"""`ts compare` shows its plan before it runs (issue 50, item 7): without --methods or --seeds it prints
the runs, the iterations and the time they would take on this machine, and starts nothing; --yes (or
naming methods or seeds) starts it. The estimate comes from the seconds the runs folder's manifests
recorded (experiments/compare_estimate.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from thinking_seeds.config import load_config, save_config
from thinking_seeds.experiments.compare_estimate import estimate
from thinking_seeds.experiments.run_spec import plan
from thinking_seeds.flows.cli import app
from thinking_seeds.pipeline.graph import STAGES
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.run_dir import RunDir


class _Started(Exception):
    pass


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """Records a comparison that starts (its runs would train) instead of training it."""
    import thinking_seeds.experiments.compare as compare

    calls: list[str] = []

    def run_comparison(spec, console=None):
        calls.append(spec.compare_id)
        return "report.md"

    monkeypatch.setattr(compare, "run_comparison", run_comparison)
    return calls


def _ts(tmp_path, *args: str):
    out = ["--out", str(tmp_path / "out"), "--id", "t", "--no-prefect"]
    return CliRunner().invoke(
        app, ["compare", *out, *args], env={"TS_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "300"}
    )


def test_without_methods_or_seeds_it_prints_the_plan_and_starts_nothing(tmp_path, started):
    r = _ts(tmp_path)
    assert r.exit_code == 0, r.output
    assert "15 runs (grpo, seq_mix, luffy, prefix_context, thinking_seeds x seeds 0,1,2)" in r.output
    iterations = 15 * load_config("tiny", []).iterations
    assert f"15 runs (0 complete), {iterations} iterations to train; no estimate of the time" in r.output
    assert "nothing started: add --yes to run this comparison" in r.output
    assert started == []
    assert not (tmp_path / "out" / "t").exists() and not list((tmp_path / "runs").glob("t-*"))  # nothing written


@pytest.mark.parametrize(
    "args", [["--yes"], ["--methods", "grpo,thinking_seeds"], ["--seeds", "0"]], ids=lambda a: a[0]
)
def test_yes_or_an_explicit_request_starts_it(tmp_path, started, args):
    r = _ts(tmp_path, *args)
    assert r.exit_code == 0, r.output
    assert started == ["t"] and "nothing started" not in r.output
    assert "iterations to train" in r.output  # the plan is printed before it starts, too


def _finished_run(runs_dir, run_id: str, overrides: list[str], seconds: list[float]) -> None:
    """A run directory whose iterations finished, iteration k's stages taking `seconds[k]` in all."""
    cfg = load_config("tiny", overrides)
    run = RunDir.for_run(run_id, runs_dir)
    run.root.mkdir(parents=True)
    save_config(cfg, run.config_path)
    for k, total in enumerate(seconds):
        for stage in STAGES:
            share = total / len(STAGES)
            run.write_manifest(Manifest(stage, k, cfg.config_hash(), seconds={"a": share / 2, "b": share / 2}))


def test_the_estimate_is_measured_from_runs_with_the_same_settings(tmp_path):
    runs = tmp_path / "runs"
    specs = plan("tiny", ["grpo", "thinking_seeds"], [0, 1], ["iterations=4"], None, "c")
    # grpo measured by an earlier run of another seed and length: 10 s and 20 s an iteration
    _finished_run(runs, "pilot-grpo", ["iterations=2", "algorithm=grpo", "seed=7"], [10.0, 20.0])
    # another setting (lr) is not the same iteration: left out
    _finished_run(runs, "other", ["iterations=2", "algorithm=grpo", "seed=7", "update.lr=0.5"], [1000.0, 1000.0])
    # c-grpo-s0 itself has 3 of its 4 iterations done (a resumed comparison): 1 left
    _finished_run(runs, "c-grpo-s0", ["iterations=4", "algorithm=grpo", "seed=0"], [15.0, 15.0, 15.0])

    e = estimate(specs, runs, parallel=2)
    assert (e.runs, e.complete, e.iterations) == (4, 0, 1 + 4 + 4 + 4)
    assert e.unmeasured == ["thinking_seeds"]  # never run here: not guessed
    mean = (10 + 20 + 15 * 3) / 5  # every finished iteration of grpo's settings
    assert e.seconds == pytest.approx((1 + 4) * mean / 2) and e.measured_from == 5
    assert "about 38 s on this machine at 2 at once" in e.text() and "not counted: thinking_seeds" in e.text()

    _finished_run(runs, "c-grpo-s1", ["iterations=4", "algorithm=grpo", "seed=1"], [15.0] * 4)
    assert estimate(specs, runs, parallel=2).complete == 1
