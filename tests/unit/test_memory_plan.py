"""The memory plan (`ts plan`, train/memory_plan.py): its arithmetic on a known small config, worked out
here by hand; the refusals (a 7B full fine-tune on one 80 GB GPU, the same sharded over 8); `ts plan`'s
output and `ts train`'s refusal through the CLI; every preset fits this machine."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from thinking_seeds.config import ConfigError, available_presets, load_config
from thinking_seeds.flows.cli import app
from thinking_seeds.train import memory_check
from thinking_seeds.train.memory_check import check_fits, model_shape
from thinking_seeds.train.memory_fit import refusal
from thinking_seeds.train.memory_plan import (
    CHECKPOINTING_FROM_PARAMS,
    LOGPROB_BYTES_FULL,
    activation_bytes,
    device_totals,
    plan_processes,
)

GiB = 2**30
runner = CliRunner()

# Qwen2-7B's config.json (its published architecture: 7.6B parameters, vocabulary 152,064)
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "vocab_size": 152064,
}
SMALL = dict(QWEN2_7B, hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4)
SMALL.update(num_key_value_heads=2, vocab_size=1000)


def _model_dir(tmp_path, name: str, config: dict):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return d


def test_plan_of_a_small_qwen2_is_the_arithmetic(tmp_path):
    d = _model_dir(tmp_path, "small", SMALL)
    shape = model_shape(d)
    h, inter, V, L, kv = 64, 256, 1000, 2, 2 * 16  # kv: 2 KV heads × head_dim 16
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * inter + 2 * h  # q,k,v with bias, o, MLP, 2 norms
    P = 2 * V * h + L * layer + h  # untied embedding and head, the final norm
    assert shape.params == P == 251_456
    assert (shape.layers, shape.hidden, shape.kv_heads, shape.head_dim, shape.vocab) == (2, 64, 2, 16, 1000)
    assert shape.embedding_only == V * h and shape.largest_param == V * h and shape.largest_layer == layer

    sets = [f"model.path={d}", "device=cpu", "update.max_tokens_per_micro_batch=null", "update.micro_batch_size=8"]
    sets += ["update.logprob_chunk_size=null", "rollout.max_new_tokens=32", "rollout.batch_size=16"]
    sets += ["update.gradient_checkpointing=false"]
    cfg = load_config("tiny", sets)
    prompt = 16
    engine, trainer = plan_processes(shape, cfg, gpus=0, prompt_tokens=prompt)
    assert (engine.role, trainer.role, engine.device, trainer.device) == (
        "pipeline (engine)",
        "trainer rank 0",
        "cpu",
        "cpu",
    )
    # 16 bytes per parameter: fp32 weights 4, gradients 4, AdamW's two moments 8
    assert trainer.item("weights") == 4 * P and trainer.item("gradients") == 4 * P and trainer.item("AdamW") == 8 * P
    tokens, response = 8 * (prompt + 32), 8 * 32  # micro-batch rows × (context + response), × response
    assert trainer.item("log-prob path") == response * V * LOGPROB_BYTES_FULL == 5_120_000
    per_layer = 32 * h + 16 * inter + 8 * kv  # fp32 bytes autograd keeps per token and layer
    assert trainer.item("activations") == tokens * (L * per_layer + 3 * h * 4) == 5_210_112
    assert activation_bytes(shape, tokens, "float32", True) == tokens * (L * h * 4 + per_layer + 3 * h * 4)
    assert engine.item("KV cache") == L * 2 * 2 * 16 * 4 * 16 * (prompt + 32) == 393_216
    assert engine.item("hand-over buffers") == 2 * P * 4  # θ_k and θ_{k+1} from the persistent trainer
    fwd = 4 * P + 8 * P + 5_210_112 + 5_120_000 + 4 * V * h  # + the head's gradient, landing first
    assert trainer.phase_bytes()["update forward/backward"] == fwd == trainer.peak
    assert device_totals([engine, trainer]) == {"cpu": engine.peak + trainer.peak}

    chunked = load_config("tiny", [s for s in sets if "logprob" not in s] + ["update.logprob_chunk_size=100"])
    t = plan_processes(shape, chunked, gpus=0, prompt_tokens=prompt)[1]
    assert t.item("log-prob path") == 100 * V * LOGPROB_BYTES_FULL == 2_000_000  # one chunk of 100 tokens
    # in chunks the head's gradient accumulates while the path is alive: every gradient counts
    assert t.phase_bytes()["update forward/backward"] == 4 * P + 8 * P + 5_210_112 + 2_000_000 + 4 * P


def test_mixed_precision_and_lora_change_what_is_held(tmp_path):
    shape = model_shape(_model_dir(tmp_path, "small", SMALL))
    base = ["device=cpu", "update.gradient_checkpointing=false"]
    bf16 = load_config("tiny", [f"model.path={tmp_path / 'small'}", *base, "update.mixed_precision=bf16"])
    engine, trainer = plan_processes(shape, bf16, gpus=0)
    P = shape.params
    assert trainer.item("weights") + trainer.item("gradients") + trainer.item("AdamW") == 16 * P  # fp32 masters
    assert trainer.item("autocast copies") == 2 * (P - shape.embedding_only)
    assert engine.item("engine weights") == 2 * P  # the engine samples in bf16
    lora = load_config("tiny", [f"model.path={tmp_path / 'small'}", *base, "model.lora={r: 4}"])
    lshape = model_shape(tmp_path / "small", lora.model.lora)
    # r × (in + out) for q, k, v, o of each layer: (64+64) + 2 × (64+32) + (64+64)
    assert lshape.lora_params == 2 * 4 * (128 + 2 * 96 + 128)
    t = plan_processes(lshape, lora, gpus=0)[1]
    assert t.item("gradients") == 4 * lshape.lora_params and t.item("AdamW") == 8 * lshape.lora_params
    assert t.item("weights") == 4 * P and t.item("largest gradient") == 0  # the frozen base has no gradient


def _seven_b(tmp_path):
    d = _model_dir(tmp_path, "qwen2-7b", QWEN2_7B)
    return d, model_shape(d)


def test_a_7b_full_fine_tune_on_one_80gb_gpu_is_refused_and_fsdp2_over_8_fits(tmp_path):
    d, shape = _seven_b(tmp_path)
    assert shape.params == 7_615_616_512  # Qwen2-7B's published count
    host = {"cpu": 1024 * GiB}
    one = {**host, "cuda:0": 80 * GiB}
    cfg = load_config("tiny", [f"model.path={d}", "device=cuda", "rollout.max_new_tokens=1024"])
    line = refusal(shape, cfg, one, gpus=1)
    assert line is not None and "cuda:0" in line and "80.0 GiB" in line
    assert "update.strategy=fsdp2" in line and "model.lora" in line
    assert "\n" not in line

    eight = {**host, **{f"cuda:{i}": 80 * GiB for i in range(8)}}
    assert "update.strategy=fsdp2 with update.num_processes=" in refusal(shape, cfg, eight, gpus=8)
    sharded = [f"model.path={d}", "device=cuda", "rollout.max_new_tokens=1024", "update.strategy=fsdp2"]
    sharded += ["update.num_processes=8", "update.mixed_precision=bf16"]
    fsdp2 = load_config("tiny", sharded)
    assert refusal(shape, fsdp2, eight, gpus=8) is None
    totals = device_totals(plan_processes(shape, fsdp2, gpus=8))
    assert set(totals) == {"cpu", *(f"cuda:{i}" for i in range(8))}
    assert totals["cuda:0"] > totals["cuda:1"]  # the engine shares GPU 0 with trainer rank 0


def test_a_7b_on_a_cpu_host_too_small_names_lora(tmp_path):
    d, shape = _seven_b(tmp_path)
    line = refusal(shape, load_config("tiny", [f"model.path={d}", "device=cpu"]), {"cpu": 64 * GiB}, gpus=0)
    assert line is not None and "host memory" in line and "set model.lora" in line and "GPUs" not in line


def test_micro_batch_too_large_names_the_key(tmp_path):
    shape = model_shape(_model_dir(tmp_path, "small", SMALL))
    sets = [f"model.path={tmp_path / 'small'}", "device=cpu", "update.logprob_chunk_size=null"]
    sets += ["update.max_tokens_per_micro_batch=null", "update.micro_batch_size=128", "rollout.max_new_tokens=512"]
    sets += ["update.gradient_checkpointing=false"]
    cfg = load_config("tiny", sets)
    line = refusal(shape, cfg, {"cpu": 1 * GiB}, gpus=0)  # 128 × 512 tokens × 1000 × 20 B = 1.2 GiB of logits
    assert line is not None and "host memory" in line and "lower update.micro_batch_size to" in line
    smaller = int(line.split("lower update.micro_batch_size to ")[1].split()[0])
    fixed = load_config("tiny", [*sets, f"update.micro_batch_size={smaller}"])
    assert refusal(shape, fixed, {"cpu": 1 * GiB}, gpus=0) is None


def test_every_preset_fits_this_machine():
    for preset in available_presets():
        cfg = load_config(preset)
        try:
            memory_check.model_shape(cfg.model.path)
        except ValueError:  # a builtin model not built on this machine (smollm2): nothing to plan
            continue
        check_fits(cfg)


def test_ts_plan_prints_every_process_and_the_16_bytes(tmp_path):
    r = runner.invoke(app, ["plan", "--preset", "tiny", "--set", "device=cpu"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    for text in ("trainer rank 0 on cpu", "pipeline (engine) on cpu", "16 bytes per parameter", "KV cache"):
        assert text in r.output
    assert "log-prob path" in r.output and "activations with gradient_checkpointing=" in r.output
    assert "host memory:" in r.output and r.output.rstrip().endswith("fits")
    assert re.search(r"prompts of up to \d+ tokens \(the data's longest\)", r.output), r.output  # not 256


def test_ts_plan_exits_2_with_the_line_for_a_7b_on_one_gpu(tmp_path):
    d, _ = _seven_b(tmp_path)
    args = ["plan", "--set", f"model.path={d}", "--set", "device=cuda", "--gpus", "1", "--gpu-gib", "80"]
    r = runner.invoke(app, [*args, "--host-gib", "1024"], env={"COLUMNS": "250"})
    assert r.exit_code == 2, r.output
    assert "trainer rank 0 on cuda:0" in r.output and "error: memory:" in r.output
    assert "update.strategy=fsdp2" in r.output


def test_ts_train_refuses_a_run_that_cannot_fit_before_writing_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_check, "capacities", lambda *a, **k: {"cpu": 2**20})  # a 1 MiB host
    runs = tmp_path / "runs"
    r = runner.invoke(
        app, ["train", "--run-id", "big", "--no-prefect", "--set", "device=cpu"], env={"TS_RUNS_DIR": str(runs)}
    )
    assert r.exit_code == 2, r.output
    assert "memory: the run needs" in r.output and "host memory" in r.output
    assert re.search(r"set (model|update|rollout)\.\w+", r.output), r.output  # the key to change, named
    assert not (runs / "big").exists()


def test_check_fits_raises_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_check, "capacities", lambda *a, **k: {"cpu": 2**20})
    with pytest.raises(ConfigError, match="`ts plan` shows the whole plan"):
        check_fits(load_config("tiny", ["device=cpu"]))


def test_the_plan_resolves_checkpointing_as_the_trainer_does():
    from thinking_seeds.train import trainer

    assert CHECKPOINTING_FROM_PARAMS == trainer.CHECKPOINTING_FROM_PARAMS


def test_the_plan_holds_the_evaluations_responses_in_host_memory(tmp_path):
    d = _model_dir(tmp_path, "small", SMALL)
    shape = model_shape(d)
    sets = [f"model.path={d}", "rollout.max_new_tokens=32", "eval.prompts=8", "eval.samples=4"]
    per = 16 * 8 + 32 * 44 + 1024  # per response: prompt tokens × 8 B + response tokens × 44 B + 1 KiB
    engine, _ = plan_processes(shape, load_config("tiny", [*sets, "device=cpu"]), gpus=0, prompt_tokens=16)
    assert engine.item("evaluation responses") == 8 * 4 * per
    assert engine.phase_bytes()["evaluation"] == engine.phase_bytes()["generation"] + 8 * 4 * per
    for launcher in ("in_process", "accelerate"):  # on a GPU: the pipeline's host memory
        cfg = load_config("tiny", [*sets, "device=cuda", f"update.launcher={launcher}"])
        host = [p for p in plan_processes(shape, cfg, gpus=1, prompt_tokens=16) if p.device == "cpu"]
        assert [p.role for p in host] == ["pipeline (host memory)"] and host[0].peak >= 8 * 4 * per

    r = runner.invoke(app, ["plan", "--set", "device=cpu", "--set", "eval.samples=16384"], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "evaluation responses" in r.output and "64 prompts × 16384 samples" in r.output
    r = runner.invoke(
        app, ["plan", "--set", "device=cpu", "--set", "eval.samples=16384", "--host-gib", "4"], env={"COLUMNS": "250"}
    )
    assert r.exit_code == 2 and "lower eval.samples to 8192 (from 16384)" in r.output, r.output
