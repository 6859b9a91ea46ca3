"""Issue #16 on a CPU: the `device` setting, bf16 mixed precision, and that nothing assumes a GPU.

What a CPU can check of the GPU path: the explicit device (`device=cpu`) places the engine and the
trainer; bf16 autocast with fp32 master weights trains (finite loss and ratios) and the trainer's
π_old recompute gives on-policy ratios of exactly 1 on unchanged weights; the config refuses the
inconsistent combinations in one line; importing every module touches no CUDA; the accelerate
command carries the precision and the device; and the device check's CPU half runs (slow).
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.engine.models import DeviceError, resolve_device
from thinking_seeds.pipeline.loop import run_prepare, run_stage
from thinking_seeds.pipeline.stages import Session, accelerate_command, update
from thinking_seeds.store.parquet_io import read_table, write_table_atomic
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import ROLLOUT_SCHEMA

REPO = Path(__file__).resolve().parent.parent
UPDATE = ["update.micro_batch_size=8", "update.mini_batches=2", "update.lr=1e-3"]


# --- the settings -------------------------------------------------------------------------------


def test_device_and_precision_settings():
    cfg = load_config("tiny")
    assert (cfg.device, cfg.update.mixed_precision, cfg.update.recompute_old_logprobs) == ("auto", "no", False)
    assert cfg.engine_dtype == "float32"
    # `device` is where, not what: it leaves the stage cache key alone (a run resumes on a GPU);
    # mixed_precision at its default hashes as before the key existed.
    assert load_config("tiny", ["device=cpu"]).config_hash() == cfg.config_hash()
    assert load_config("tiny", ["device=cuda:3"]).config_hash() == cfg.config_hash()
    assert load_config("tiny", ["update.mixed_precision=no"]).config_hash() == cfg.config_hash()  # YAML's `no` is false
    bf16 = load_config("tiny", ["update.mixed_precision=bf16"])
    assert bf16.config_hash() != cfg.config_hash()
    # bf16 anywhere: the engine samples in bf16 and the trainer recomputes π_old automatically.
    assert (bf16.engine_dtype, bf16.update.recompute_old_logprobs) == ("bfloat16", True)
    pure = load_config("tiny", ["model.dtype=bfloat16"])
    assert (pure.engine_dtype, pure.update.recompute_old_logprobs) == ("bfloat16", True)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["device=gpu"], "device: must be auto, cpu, cuda or cuda:N"),
        (["device=cuda:x"], "device: must be auto, cpu, cuda or cuda:N"),
        (["update.mixed_precision=fp16"], "update.mixed_precision"),
        (["update.mixed_precision=bf16", "update.recompute_old_logprobs=false"], "on-policy ratios would not be 1"),
        (["model.dtype=bfloat16", "update.recompute_old_logprobs=false"], "on-policy ratios would not be 1"),
        (["model.dtype=bfloat16", "update.mixed_precision=bf16"], "keeps fp32 master weights: set model.dtype=float32"),
    ],
)
def test_inconsistent_settings_are_refused(overrides, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        load_config("tiny", overrides)


def test_resolve_device(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(DeviceError, match="device=cuda:1, but .*use device=cpu"):
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match="only 2 GPU"):
        resolve_device("cuda:2")


def test_accelerate_command_carries_precision_and_device(tmp_path):
    run = RunDir.for_run("acc", tmp_path)
    cfg = load_config("tiny", ["device=cpu", "update.mixed_precision=bf16"])
    cmd = accelerate_command(run, cfg, 0, tmp_path / "m.json", None)
    assert cmd[cmd.index("--mixed_precision") + 1] == "bf16"
    assert cmd[-1] == "--cpu" and "--gpu_ids" not in cmd
    cmd = accelerate_command(run, load_config("tiny", ["device=cpu"]), 0, tmp_path / "m.json", None)
    assert cmd[cmd.index("--mixed_precision") + 1] == "no"
    with pytest.raises(DeviceError):  # this machine has no GPU: one line, before any launch
        if torch.cuda.is_available():
            pytest.skip("a GPU is visible")
        accelerate_command(run, load_config("tiny", ["device=cuda:1"]), 0, tmp_path / "m.json", None)


# --- nothing assumes a device at import ---------------------------------------------------------

_IMPORT_ALL = r"""
import importlib, pkgutil, traceback, torch
calls = []
def spy(name, orig):
    def wrapper(*a, **k):  # libraries may ask (transformers does); our modules must not, at import
        if any("/ts_core/" in f.filename for f in traceback.extract_stack()[:-1]):
            calls.append(name)
        return orig(*a, **k)
    wrapper.__name__ = name
    return wrapper
for name in ("is_available", "init", "device_count", "current_device", "set_device", "synchronize",
             "get_device_properties", "mem_get_info"):
    setattr(torch.cuda, name, spy(name, getattr(torch.cuda, name)))
torch.Tensor.cuda = spy("Tensor.cuda", torch.Tensor.cuda)
torch.nn.Module.cuda = spy("Module.cuda", torch.nn.Module.cuda)
import thinking_seeds
names = [m.name for m in pkgutil.walk_packages(thinking_seeds.__path__, "thinking_seeds.")]
for n in names:
    importlib.import_module(n)
assert not calls, f"CUDA touched at import by thinking_seeds: {calls}"
print(len(names))
"""


def test_no_module_touches_cuda_at_import():
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    r = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert int(r.stdout.split()[-1]) > 20
    # And no code moves a tensor with .cuda(): placement goes through resolve_device / .to(device).
    offenders = [str(p) for p in (REPO / "ts_core").rglob("*.py") if ".cuda(" in p.read_text()]
    assert not offenders, offenders


# --- runs on the CPU ----------------------------------------------------------------------------


def _verified(tmp_path: Path, overrides: list[str]) -> tuple[RunDir, object, Session]:
    cfg = load_config("tiny", overrides)
    run = RunDir.for_run("dev", tmp_path)
    run_prepare(run, cfg)
    s = Session(run, cfg)
    for stage in ("snapshot", "seeds", "continuation", "verify"):
        run_stage(s, stage, 0)
    # A random-weights model earns no reward: random advantages, so the update has a gradient.
    t = read_table(run.rollouts(0), ROLLOUT_SCHEMA)
    rng = random.Random(7)
    adv = pa.array([rng.uniform(-2.0, 2.0) for _ in range(t.num_rows)], pa.float32())
    t = t.set_column(t.schema.get_field_index("advantage"), "advantage", adv.cast(t.schema.field("advantage").type))
    write_table_atomic(t, run.rollouts(0), schema=ROLLOUT_SCHEMA)
    return run, cfg, s


def test_explicit_cpu_device_runs(tmp_path, tiny_overrides):
    run, cfg, s = _verified(tmp_path, tiny_overrides + UPDATE + ["device=cpu"])
    try:
        eng = s.engine()
        assert eng.device == torch.device("cpu") and next(eng.model.parameters()).dtype == torch.float32
        m = update(s, 0)
    finally:
        s.close()
    assert math.isfinite(m.metrics["actor/pg_loss"]) and "actor/engine_logprob_diff/max" not in m.metrics
    assert (run.policy(1) / "model.safetensors").is_file()


def test_bf16_mixed_precision_on_cpu(tmp_path, tiny_overrides):
    """bf16 engine, bf16-autocast trainer with fp32 masters: finite loss and ratios, π_old recomputed."""
    from thinking_seeds.algo.stats import Stats
    from thinking_seeds.engine.lora import load_policy
    from thinking_seeds.engine.scoring import score_responses
    from thinking_seeds.train.trainer import (
        autocast,
        load_batch,
        loss_settings,
        micro_loss,
        recompute_old_logprobs,
        schedule,
    )

    run, cfg, s = _verified(tmp_path, tiny_overrides + UPDATE + ["device=cpu", "update.mixed_precision=bf16"])
    try:
        eng = s.engine()
        assert next(eng.model.parameters()).dtype == torch.bfloat16  # bf16 generation
    finally:
        s.close()

    # The recompute: the first optimizer step's forward sees exactly the recomputed π_old.
    model, tok = load_policy(run.policy(0), cfg.model.dtype)
    model.train()
    batch = load_batch(run.rollouts(0))
    engine_lp = [list(x) for x in batch.old_logprobs]
    diff = recompute_old_logprobs(model, batch, cfg, tok.pad_token_id)
    assert 0 < diff["actor/engine_logprob_diff/max"] < 1.0  # bf16 engine vs autocast trainer: close, not equal
    assert batch.old_logprobs != engine_lp
    (mini, micro), _ = schedule(len(batch), cfg, 0, 0, 1)
    settings = loss_settings(cfg, global_tokens=1.0, global_seqs=1.0)
    worst = 0.0
    stats = Stats()
    for idx in micro:
        mb = batch.select(idx)
        with autocast(cfg, model):  # with grad, as in the update
            sc = score_responses(
                model, mb.contexts, mb.responses, pad_id=tok.pad_token_id, temperature=cfg.rollout.temperature
            )
        for j, i in enumerate(idx):
            n = len(batch.responses[i])
            if n:
                worst = max(
                    worst, float((sc.logprobs[j, :n].detach() - torch.tensor(batch.old_logprobs[i])).abs().max())
                )
        out = micro_loss(model, mb, cfg, tok.pad_token_id, settings)
        assert torch.isfinite(out.loss)
        stats.merge(out.stats)
    assert worst <= 1e-6, f"on-policy log-ratio {worst} on unchanged weights"
    means = stats.metrics()
    assert abs(means["actor/ratio_mean/on_policy"] - 1.0) <= 1e-6, means
    assert abs(means["actor/ratio_mean/continuation"] - 1.0) <= 1e-6, means
    assert means["actor/pg_clipfrac/on_policy"] == 0.0 and means["actor/pg_clipfrac/continuation"] == 0.0

    # The whole update stage: finite, the masters stay fp32 on disk, the optimizer state too.
    m = update(Session(run, cfg), 0)
    assert all(math.isfinite(v) for v in m.metrics.values()), m.metrics
    assert m.metrics["actor/engine_logprob_diff/max"] > 0
    w = load_file(str(run.policy(1) / "model.safetensors"))
    assert {t.dtype for t in w.values()} == {torch.float32}
    opt = load_file(str(run.policy(1) / "optimizer.safetensors"))
    assert {t.dtype for k, t in opt.items() if "exp_avg" in k} == {torch.float32}
    w0 = load_file(str(run.policy(0) / "model.safetensors"))
    assert any(not torch.equal(w0[k], w[k]) for k in w), "the bf16 update did not move the weights"


def test_bf16_under_accelerate_launch_on_cpu(tmp_path, tiny_overrides):
    """`accelerate launch --mixed_precision bf16 ... --cpu`: the same exact recompute, in the worker."""
    run, cfg, s = _verified(
        tmp_path,
        tiny_overrides
        + UPDATE
        + ["device=cpu", "update.mixed_precision=bf16", "update.launcher=accelerate", "update.mini_batches=1"],
    )
    s.close()
    m = update(Session(run, cfg), 0)
    assert all(math.isfinite(v) for v in m.metrics.values()), m.metrics
    assert m.metrics["actor/engine_logprob_diff/max"] > 0
    assert abs(m.metrics["actor/ratio_mean/on_policy"] - 1.0) <= 1e-6  # one step: unchanged weights throughout
    assert {t.dtype for t in load_file(str(run.policy(1) / "model.safetensors")).values()} == {torch.float32}


# --- the device check's CPU half ----------------------------------------------------------------


@pytest.mark.slow
def test_device_check_cpu_only(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), PYTHON=sys.executable)
    r = subprocess.run(
        ["bash", "scripts/device_check.sh", "--cpu-only"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = json.loads((tmp_path / "out" / "device_check.json").read_text())
    cpu = [c for c in res["cases"] if c["device"] == "cpu"]
    assert {c["algorithm"] for c in cpu} == {"grpo", "thinking_seeds"}
    for c in cpu:
        assert c["status"] == "ok", c
        assert c["gen_tokens_per_s"] > 0 and c["update_s_per_step"] > 0
        assert 0 <= c["engine_trainer_max_abs_logprob_diff"] < 1.0
    assert "gpu" in res and res["gpu"]["skipped"]
