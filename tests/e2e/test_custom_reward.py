"""A user's reward function by import path (`reward.fn`, verl's custom reward): called in the
verifier's worker processes with the same statuses and time limit, validated before any work."""

import sys
import textwrap

import pytest

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.data.rewards import Verifier
from thinking_seeds.data.sources import Message, Prompt, load_dataset
from thinking_seeds.pipeline.loop import train
from thinking_seeds.pipeline.stage_prepare import prepare
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

MODULE = '''
import time

def length_reward(data_source, solution_str, ground_truth, extra_info):
    """1 when the response mentions the ground truth anywhere, 0.5 for 'half', None for empty."""
    if solution_str == "":
        return None
    if solution_str == "slow":
        time.sleep(10)
    if solution_str == "bad":
        return "not a number"
    if solution_str == "boom":
        raise RuntimeError("checker bug")
    if solution_str == "half":
        return {"score": 0.5, "why": "partial"}
    return 1.0 if ground_truth in solution_str else 0.0

def returns_text(data_source, solution_str, ground_truth, extra_info):
    return "yes"
'''


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))  # spawn workers inherit sys.path
    yield "my_rewards"
    sys.modules.pop("my_rewards", None)


def test_statuses_in_worker_processes(user_module):
    p = Prompt("p-0", (Message("user", "q"),), "42", "chain_sum")
    texts = ["the answer is 42", "it is 41", "", "half", "bad", "boom", "slow"]
    with Verifier(backend="custom", fn=f"{user_module}:length_reward", timeout_s=1.0) as v:
        got = v.score_batch(texts, [p] * len(texts))
    assert [(x.reward, x.status) for x in got] == [
        (1.0, "ok"),
        (0.0, "wrong"),
        (0.0, "no_answer"),
        (0.5, "wrong"),
        (0.0, "error"),
        (0.0, "error"),
        (0.0, "timeout"),
    ]
    assert "expected a finite number" in got[4].detail and "checker bug" in got[5].detail


def test_bad_functions_fail_before_any_work(user_module, tmp_path, tiny_model_dir):
    with pytest.raises(ConfigError, match="module 'no_such_mod' does not import"):
        load_config("tiny", ["reward.fn=no_such_mod:f"])
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        load_config("tiny", [f"reward.fn={user_module}:nope"])
    with pytest.raises(ConfigError, match="must look like package.module:function"):
        load_config("tiny", ["reward.fn=justaname"])
    cfg = load_config("tiny", [f"reward.fn={user_module}:returns_text", f"model.path={tiny_model_dir}", "iterations=1"])
    with pytest.raises(ValueError, match="returned str 'yes'; expected a number"):
        train(RunDir.for_run("bad", tmp_path), cfg)
    assert not (tmp_path / "bad" / "policy").exists()  # refused before θ_0 was written
    # and before anything that would hold the run to the refused config: the fixed function (another
    # config hash) starts under the same run id instead of "was started with another config"
    assert not (tmp_path / "bad" / "config.yaml").exists() and not (tmp_path / "bad" / "data").exists()
    fixed = cfg.model_copy(update={"reward": cfg.reward.model_copy(update={"fn": f"{user_module}:length_reward"})})
    assert prepare(RunDir.for_run("bad", tmp_path), fixed).stage == "prepare"


def test_a_run_scored_by_the_users_function(user_module, tmp_path, tiny_model_dir):
    cfg = load_config(
        "tiny",
        [
            f"reward.fn={user_module}:length_reward",
            f"model.path={tiny_model_dir}",
            "iterations=1",
            "rollout.prompts_per_iteration=4",
            "data.train_size=40",
            "data.val_size=8",
            "data.test_size=8",
            "eval.prompts=4",
            "eval.samples=2",
        ],
    )
    assert cfg.reward.backend == "custom"
    run = train(RunDir.for_run("custom", tmp_path), cfg)
    rows = read_table(run.rollouts(0)).to_pylist()
    truth = {p.prompt_id: p.ground_truth for p in load_dataset(run.data_dir / "train.parquet")}
    assert len(rows) == 4 * cfg.rollout.group_size
    for r in rows:  # the function's own rule, applied to the whole response text
        text = r["response_text"]
        want = (0.0, "no_answer") if text == "" else ((1.0, "ok") if truth[r["prompt_id"]] in text else (0.0, "wrong"))
        assert (r["reward"], r["status"]) == want
