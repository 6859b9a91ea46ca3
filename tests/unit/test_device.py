"""Issue #16 on a CPU, the settings: the `device` setting and bf16 mixed precision in the config, the
device resolution, the accelerate command's precision and device. What runs on the CPU (bf16
training, nothing touches CUDA at import): e2e/test_device_cpu.py; the device check's CPU
half: e2e/test_device_check.py.
"""

from __future__ import annotations

import pytest
import torch

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.engine.models import DeviceError, resolve_device
from thinking_seeds.pipeline.update_launcher import accelerate_command
from thinking_seeds.store.run_dir import RunDir

# --- the settings -------------------------------------------------------------------------------


def test_device_and_precision_settings():
    cfg = load_config("tiny")
    assert (cfg.device, cfg.update.mixed_precision, cfg.update.recompute_old_logprobs) == ("auto", "no", False)
    assert cfg.engine_dtype == "float32"
    # `device` is where, not what: it leaves the stage cache key alone (a run resumes on a GPU);
    # mixed_precision at its default hashes as before the key existed.
    assert load_config("tiny", ["device=cpu"]).config_hash() == cfg.config_hash()
    assert load_config("tiny", ["device=cuda:3", "update.mixed_precision=no"]).config_hash() == cfg.config_hash()
    # ... but on a GPU the default precision is bf16 (update.mixed_precision=auto, unit/test_gpu_defaults.py)
    assert load_config("tiny", ["device=cuda:3"]).config_hash() != cfg.config_hash()
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
