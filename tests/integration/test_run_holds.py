"""A run's processes are the run's (pipeline/run_resources.py): its verifier workers and engine are held
while it runs and stopped when it closes, whether it ends or fails; nothing of them outlives it."""

import os
import sys

import pytest

from thinking_seeds.config import load_config
from thinking_seeds.pipeline import session
from thinking_seeds.pipeline.loop import train
from thinking_seeds.pipeline.run_resources import VERIFIER_KIND, held_process, held_resources
from thinking_seeds.store.run_dir import RunDir


@pytest.fixture(scope="module")
def overrides(tmp_path_factory, tiny_overrides):
    """The tiny run with a custom reward: every response reaches the verifier's worker (the tiny model's
    answers have no \\boxed{}, which the built-in checkers score in this process)."""
    d = tmp_path_factory.mktemp("reward")
    body = "def half(data_source, solution_str, ground_truth, extra_info):\n    return len(solution_str) % 2\n"
    (d / "holds_reward.py").write_text(body)
    sys.path.insert(0, str(d))  # spawned verifier workers inherit sys.path
    yield [*tiny_overrides, "reward.fn=holds_reward:half", "reward.workers=1"]
    sys.path.remove(str(d))
    sys.modules.pop("holds_reward", None)


def _verifier(run):
    (held,) = [h.obj for k, h in held_resources(run).processes.items() if k.startswith(VERIFIER_KIND)]
    return held


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_runs_verifier_workers_and_engine_end_with_it(tmp_path, overrides):
    run = RunDir.for_run("holds", tmp_path)
    seen: dict = {}

    def look(_cfg):  # in the run's life
        seen["pids"] = _verifier(run).worker_pids
        seen["engine"] = held_process(run, "engine")

    train(run, load_config("tiny", overrides), then=look)
    assert seen["pids"] and seen["engine"] is not None  # held while it ran (reward.workers=1: one worker)
    assert held_resources(run) is None
    assert not any(_alive(p) for p in seen["pids"])  # the workers ended with the run, not at exit


def test_a_failed_run_lets_go_of_its_processes_too(tmp_path, overrides, monkeypatch):
    run = RunDir.for_run("fails", tmp_path)
    seen: dict = {}
    real = session.Session.generate

    def generate_then_fail(self, *a, **k):
        real(self, *a, **k)
        seen["pids"] = _verifier(run).worker_pids  # iteration 0's seeds: θ_0 was evaluated
        raise RuntimeError("the engine broke")

    monkeypatch.setattr(session.Session, "generate", generate_then_fail)
    with pytest.raises(RuntimeError, match="the engine broke"):
        train(run, load_config("tiny", overrides))
    assert seen["pids"] and held_resources(run) is None
    assert not any(_alive(p) for p in seen["pids"])


def test_one_verifier_per_settings_the_rewards_and_the_vote_share_it(tmp_path):
    from thinking_seeds.pipeline.run_resources import close_resources
    from thinking_seeds.pipeline.session import run_verifier

    run = RunDir.for_run("verifiers", tmp_path)
    rewards = run_verifier(run, "math_verify", True, None, 5.0, 1)
    assert run_verifier(run, "math_verify", True, None, 5.0, 1) is rewards  # ts eval --data's vote: same pool
    other = run_verifier(run, "reasoning_gym", False, None, 5.0, 1)
    assert other is not rewards and run_verifier(run, "math_verify", True, None, 5.0, 1) is rewards
    close_resources(run)
    assert held_resources(run) is None
