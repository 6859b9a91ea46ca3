"""Any local Hugging Face causal LM (Llama, Qwen2: tiny random ones with a locally trained BPE
tokenizer and a ChatML template) trains as is, and LoRA (`model.lora`, peft) updates adapters only."""

import math
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from tests.helpers.hf_models import build
from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.engine.lora import merged_state_dict
from thinking_seeds.pipeline.export import export_policy
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

# A reward the random models earn about half the time, so advantages (and gradients) are not zero.
REWARD = """
def has_one(data_source, solution_str, ground_truth, extra_info):
    return 1.0 if "1" in solution_str else 0.0
"""
SMALL = [
    "rollout.prompts_per_iteration=4",
    "rollout.group_size=4",
    "rollout.seeds_per_group=2",
    "rollout.max_new_tokens=16",
    "data.train_size=40",
    "data.val_size=8",
    "data.test_size=8",
    "eval.prompts=4",
    "eval.samples=2",
    "eval.seeded=false",
    "pool.snapshot_every=1",
    "update.lr=0.01",
    "reward.fn=ts_test_reward:has_one",
]


@pytest.fixture(scope="module")
def reward_module(tmp_path_factory):
    d = tmp_path_factory.mktemp("reward")
    (d / "ts_test_reward.py").write_text(textwrap.dedent(REWARD))
    sys.path.insert(0, str(d))
    yield
    sys.path.remove(str(d))


@pytest.mark.parametrize(
    ("arch", "dtype"),
    [("llama", "float32"), ("qwen2", "float32"), ("smollm2", "bfloat16")],  # SmolLM2 in bf16, as it ships
)
def test_any_local_hf_model_trains_with_its_own_chat_template(arch, dtype, tmp_path, reward_module):
    path = build(tmp_path / arch, arch)
    # In process: the trainer's own start would double this short run (lora_run trains through it).
    cfg = load_config(
        "tiny",
        SMALL + [f"model.path={path}", f"model.dtype={dtype}", "iterations=1", "update.launcher=in_process"],
    )
    run = train(RunDir.for_run(arch, tmp_path / "runs"), cfg)
    rows = read_table(run.rollouts(0)).to_pylist()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    start = tok.convert_tokens_to_ids("<|im_start|>")
    assert all(r["prompt_token_ids"][0] == start for r in rows)  # the model's own ChatML template
    system = "named SmolLM" in tok.decode(rows[0]["prompt_token_ids"])
    assert system == (arch == "smollm2")  # SmolLM2's template adds its default system turn
    assert {r["kind"] for r in rows} == {"on_policy", "seeded"}
    w0, w1 = load_file(run.policy(0) / "model.safetensors"), load_file(run.policy(1) / "model.safetensors")
    assert {w.dtype for w in w1.values()} == {getattr(torch, dtype)}  # trained and saved in model.dtype
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, reward_module):
    base = tmp_path_factory.mktemp("lora")
    path = build(base / "llama", "llama")
    cfg = load_config(
        "tiny",
        SMALL + [f"model.path={path}", "iterations=3", "model.lora.r=4", "model.lora.target_modules=[q_proj, v_proj]"],
    )
    return train(RunDir.for_run("lora", base / "runs"), cfg), cfg


def test_lora_checkpoints_hold_adapters_only(lora_run):
    run, _ = lora_run
    step = run.policy(3)
    assert (step / "adapter_model.safetensors").is_file() and not (step / "model.safetensors").exists()
    size = lambda d: sum(f.stat().st_size for f in d.iterdir() if f.suffix == ".safetensors")  # noqa: E731
    assert size(step) < size(run.policy(0)) / 5  # adapters + their optimizer state vs the full model
    snaps = sorted(p.name for p in run.pool_root.iterdir() if p.name.startswith("step_"))
    assert snaps == ["step_000000", "step_000001", "step_000002"]
    assert (run.pool_root / "step_000002" / "adapter_model.safetensors").is_file()


def test_lora_changes_only_the_target_modules_and_engine_matches_trainer(lora_run):
    run, _ = lora_run
    base = load_file(run.policy(0) / "model.safetensors")
    merged = merged_state_dict(run.policy(3))
    changed = {k for k in base if not torch.equal(base[k], merged[k])}
    assert changed and all(".q_proj." in k or ".v_proj." in k for k in changed)
    for k in range(3):  # one optimizer step per batch: the engine's log-probs (merged weights) = the trainer's
        m = run.read_manifest(k, "update").metrics
        assert math.isclose(m["actor/ratio_mean/on_policy"], 1.0, abs_tol=1e-4)
        assert math.isclose(m["actor/ratio_max/continuation"], 1.0, abs_tol=1e-3)


def test_lora_export_is_a_plain_model(lora_run, tmp_path):
    run, _ = lora_run
    out = export_policy(run, 3, tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    merged = merged_state_dict(run.policy(3))
    assert all(torch.equal(model.state_dict()[k], merged[k]) for k in merged)


def test_lora_target_that_does_not_exist(tmp_path, reward_module):
    path = build(tmp_path / "llama", "llama")
    cfg = load_config("tiny", SMALL + [f"model.path={path}", "iterations=1", "model.lora.target_modules=[c_attn]"])
    with pytest.raises(ValueError, match=r"model.lora.target_modules: \['c_attn'\] are not modules of .*q_proj"):
        train(RunDir.for_run("bad", tmp_path / "runs"), cfg)
    assert not (tmp_path / "runs" / "bad").exists()  # refused before the run directory was made
    with pytest.raises(ConfigError, match="model.lora.r"):
        load_config("tiny", ["model.lora.r=0"])


def test_model_directory_without_weights_tokenizer_or_template(tmp_path):
    from thinking_seeds.engine.models import ModelError, load_model

    path = build(tmp_path / "m", "llama")
    (path / "model.safetensors").rename(tmp_path / "w")
    with pytest.raises(ModelError, match="has no .safetensors weights"):
        load_model(path)
    (tmp_path / "w").rename(path / "model.safetensors")
    (path / "chat_template.jinja").unlink(missing_ok=True)
    import json

    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    _, tok = load_model(path)  # a base model: loads, its prompts written plainly (unit/test_turn_end.py)
    assert tok.chat_template is None
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (path / f).unlink(missing_ok=True)
    with pytest.raises(ModelError, match="has no tokenizer"):
        load_model(path)


def _no_tokenizer(path):
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        (path / f).unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("case", "sets", "needle"),
    [
        (
            "rg-name",
            ["data.source=reasoning_gym", "reward=reasoning_gym", "data.tasks=[{name: cuntdown}]"],
            "unknown reasoning-gym data set 'cuntdown'; did you mean countdown",
        ),
        ("no-weights", [], "model.path={model}: has no .safetensors weights; convert it"),
        ("no-tokenizer", [], "model.path={model}: has no tokenizer"),
        (
            "lora-target",
            ["model.lora.target_modules=[c_attn]"],
            "model.lora.target_modules: ['c_attn'] are not modules of {model}; its linear layers are",
        ),
        ("tracker", ["logger=[console, mlflow]"], "pip install 'thinking-seeds[mlflow]'"),
    ],
)
def test_ts_train_refuses_bad_input_in_one_line_exit_2(case, sets, needle, tmp_path, runs_dir, monkeypatch):
    """Issue #13's bad inputs through the command line: one line naming the key or file and the fix, exit 2,
    no run directory written."""
    import importlib.util

    from typer.testing import CliRunner

    from tests.helpers.verl_data import one_line
    from thinking_seeds.flows.cli import app

    model = build(tmp_path / "m", "llama")
    if case == "no-weights":
        (model / "model.safetensors").unlink()
    if case == "no-tokenizer":
        _no_tokenizer(model)
    if case == "tracker":  # as if the mlflow extra were not installed
        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "mlflow" else real(n, *a))
    args = ["train", "--no-prefect", "--run-id", "bad", "--set", f"model.path={model}"]
    r = CliRunner().invoke(app, args + [x for s in sets for x in ("--set", s)])
    assert r.exit_code == 2, r.output
    line = one_line(r.stderr.strip())
    assert line.startswith("error: ") and needle.format(model=model) in line, line
    assert list(runs_dir.iterdir()) == []
