"""Issue #52 item 5: the memory plan with a GPU's own costs (train/memory_plan.py, memory_fit.py): foreach
AdamW's temporary of every trainable parameter on CUDA, FSDP2's unsharded root (embedding, final norm, head),
the margin a GPU keeps for the caching allocator, the chunked log-prob path charged as one chunk, and prompt
lengths from the data instead of an assumed 256 tokens. Configs and arithmetic: no GPU is needed."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from thinking_seeds.config import load_config
from thinking_seeds.flows.cli import app
from thinking_seeds.pipeline.session import Session
from thinking_seeds.train import memory_check
from thinking_seeds.train.memory_check import check_fits, model_shape
from thinking_seeds.train.memory_fit import GPU_MARGIN, refusal
from thinking_seeds.train.memory_plan import LOGPROB_BYTES_FULL, device_totals, plan_processes
from thinking_seeds.train.prompt_lengths import longest_prompt_tokens

GiB = 2**30
SMALL = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "vocab_size": 1000,
}


def _small(tmp_path):
    d = tmp_path / "small"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(SMALL))
    return d, model_shape(d)


def _trainer(procs):
    return next(p for p in procs if p.role == "trainer rank 0")


def test_foreach_adamw_holds_a_temporary_of_every_trainable_parameter_on_a_gpu(tmp_path):
    d, shape = _small(tmp_path)
    P = shape.params
    gpu = _trainer(plan_processes(shape, load_config("tiny", [f"model.path={d}", "device=cuda"]), gpus=1))
    assert gpu.device == "cuda:0" and gpu.item("optimizer temporaries") == 4 * P  # +4 B per parameter (fp32)
    assert "optimizer temporaries" in gpu.phases["optimizer step"]
    cpu = _trainer(plan_processes(shape, load_config("tiny", [f"model.path={d}", "device=cpu"]), gpus=0))
    assert cpu.item("optimizer temporaries") == 2 * 4 * shape.largest_param  # single-tensor AdamW on the CPU
    sharded = [f"model.path={d}", "device=cuda", "update.strategy=fsdp2", "update.num_processes=2"]
    assert _trainer(plan_processes(shape, load_config("tiny", sharded), gpus=2)).item("optimizer temporaries") == (
        4 * P / 2
    )


def test_fsdp2_charges_its_unsharded_root(tmp_path):
    d, shape = _small(tmp_path)
    sets = [f"model.path={d}", "device=cuda", "update.strategy=fsdp2", "update.num_processes=2"]
    t = _trainer(plan_processes(shape, load_config("tiny", sets), gpus=2))  # bf16 by default on CUDA: 2 B
    root = shape.params - shape.layers * shape.largest_layer
    assert root == 2 * 1000 * 64 + 64  # untied embedding and head, the final norm
    assert t.item("FSDP2 root (unsharded)") == 2 * root * 2  # parameters and gradients, bf16 all-gathers
    assert "FSDP2 root (unsharded)" in t.phases["update forward/backward"]
    ddp = _trainer(plan_processes(shape, load_config("tiny", [f"model.path={d}", "device=cuda"]), gpus=1))
    assert ddp.item("FSDP2 root (unsharded)") == 0


def test_the_chunked_path_is_charged_one_chunk(tmp_path):
    d, shape = _small(tmp_path)
    base = [f"model.path={d}", "device=cpu", "update.logprob_chunk_size=50", "update.max_tokens_per_micro_batch=null"]
    items = set()
    for new_tokens in (64, 256):  # 4 or 16 times the response tokens: one chunk of 50 either way
        t = _trainer(plan_processes(shape, load_config("tiny", [*base, f"rollout.max_new_tokens={new_tokens}"]), 0))
        items.add(t.item("log-prob path"))
    assert items == {50 * 1000 * LOGPROB_BYTES_FULL}


def test_a_gpu_plan_keeps_a_margin_for_the_caching_allocator(tmp_path):
    d, shape = _small(tmp_path)
    cfg = load_config("tiny", [f"model.path={d}", "device=cuda"])
    total = device_totals(plan_processes(shape, cfg, gpus=1))["cuda:0"]
    roomy = {"cpu": 64 * GiB, "cuda:0": total / (1 - GPU_MARGIN / 2)}  # fits the card, not its usable share
    line = refusal(shape, cfg, roomy, gpus=1)
    assert line is not None and "usable" in line and "caching allocator" in line and "\n" not in line
    assert refusal(shape, cfg, {"cpu": 64 * GiB, "cuda:0": total / (1 - GPU_MARGIN) * 1.01}, gpus=1) is None
    host = device_totals(plan_processes(shape, load_config("tiny", [f"model.path={d}", "device=cpu"]), 0))["cpu"]
    assert refusal(shape, load_config("tiny", [f"model.path={d}", "device=cpu"]), {"cpu": host}, 0) is None  # RAM


def test_prompt_lengths_come_from_the_data(verified_run):
    run, cfg = verified_run
    s = Session(run, cfg)
    try:
        longest = s.longest_prompt()  # the stages' own encoding of the run's splits
    finally:
        s.close()
    assert longest_prompt_tokens(cfg, run.data_dir) == longest
    assert longest_prompt_tokens(cfg) == longest  # before prepare: the splits it will write, built here
    assert 10 < longest < 256


def test_check_fits_plans_the_datas_prompts(tmp_path, monkeypatch, verified_run):
    """A host that holds the plan at the data's prompts but not at prompts as long as the model allows: the
    check reads the data and lets the run start; a smaller host is refused."""
    _, cfg = verified_run
    shape = model_shape(cfg.model.path)
    longest = longest_prompt_tokens(cfg)

    def host_total(prompt):
        return device_totals(plan_processes(shape, cfg, 0, prompt))["cpu"]

    at_data, at_limit = host_total(longest), host_total(shape.max_positions - cfg.rollout.max_new_tokens)
    assert at_data < at_limit
    monkeypatch.setattr(memory_check, "capacities", lambda *a, **k: {"cpu": (at_data + at_limit) / 2})
    check_fits(cfg)
    monkeypatch.setattr(memory_check, "capacities", lambda *a, **k: {"cpu": host_total(longest - 1)})
    try:
        check_fits(cfg)
    except ValueError as e:
        assert "memory: the run needs" in str(e)
    else:
        raise AssertionError("a host one prompt token too small was not refused")


def test_ts_plan_for_another_machines_gpus_plans_its_gpu_defaults():
    """device=auto planned for --gpus N is auto on that machine: CUDA, so bf16 with fp32 masters (this one has
    no GPU, where auto means fp32)."""
    r = CliRunner().invoke(app, ["plan", "--gpus", "1", "--gpu-gib", "80"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "trainer rank 0 on cuda:0" in r.output and "(fp32 masters)" in r.output and "autocast copies" in r.output
    assert "foreach AdamW" in r.output and "72.0 usable" in r.output
