"""The README's "Use your own task and model" example (docs/examples/own-task), on a tiny scale:
the same file with a tiny random Llama instead of SmolLM2 and a smaller budget."""

import sys

import pytest

from tests.helpers import REPO as REPO_ROOT
from tests.helpers.hf_models import build
from thinking_seeds.config import load_config
from thinking_seeds.data.sources import load_dataset
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

EXAMPLE = "docs/examples/own-task"
pytestmark = pytest.mark.slow  # a whole run with LoRA, a reasoning-gym mixture and TensorBoard: CI's slow step


@pytest.fixture()
def example_on_path():
    path = str(REPO_ROOT / EXAMPLE)
    sys.path.insert(0, path)  # as PYTHONPATH=docs/examples/own-task in the README (spawn workers inherit it)
    yield REPO_ROOT / EXAMPLE / "config.yaml"
    sys.path.remove(path)
    sys.modules.pop("my_reward", None)


def test_own_task_example_runs(tmp_path, example_on_path):
    model = build(tmp_path / "llama", "llama")
    cfg = load_config(
        str(example_on_path),
        [
            f"model.path={model}",
            "iterations=2",
            "data.train_size=30",
            "data.val_size=8",
            "data.test_size=8",
            "rollout.prompts_per_iteration=4",
            "rollout.max_new_tokens=24",
            "eval.every=1",
            "eval.prompts=4",
            "eval.samples=2",
            "pool.snapshot_every=1",
        ],
    )
    assert (cfg.model.lora.r, cfg.reward.backend, cfg.logger) == (16, "custom", ["console", "tensorboard"])
    run = train(RunDir.for_run("mine", tmp_path / "runs"), cfg)
    sources = {p.data_source for p in load_dataset(run.data_dir / "train.parquet")}
    assert sources == {"basic_arithmetic", "chain_sum"}
    rows = read_table(run.rollouts(1)).to_pylist()
    assert {r["status"] for r in rows} <= {"ok", "wrong", "no_answer"}
    assert (run.policy(2) / "adapter_model.safetensors").is_file()  # LoRA adapters only
    assert any((run.root / "tensorboard").iterdir())
    assert sorted(p.name for p in run.policy_root.iterdir() if p.is_dir()) == [
        "step_000000",
        "step_000001",
        "step_000002",
    ]
