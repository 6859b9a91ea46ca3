"""Issue #52 item 3, the launch command: every `accelerate launch` of the trainer passes the neutral config
(data/accelerate_neutral.yaml) with --config_file, so the user's default accelerate config is never read (a real
launch under a hostile default: e2e/test_accelerate_isolation.py); and since accelerate writes --gpu_ids into the
child's CUDA_VISIBLE_DEVICES as given, the trainer's GPUs (indices among those this process sees) are passed as
the entries of CUDA_VISIBLE_DEVICES: under CUDA_VISIBLE_DEVICES=2,3 the process's cuda:1 is GPU 3.
"""

from __future__ import annotations

import os

import pytest
import torch

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.pipeline import update_launcher
from thinking_seeds.pipeline.update_launcher import accelerate_gpu_ids, launch_prefix


def test_gpu_ids_are_translated_through_cuda_visible_devices():
    assert accelerate_gpu_ids((0, 1), None) == "0,1"
    assert accelerate_gpu_ids((0, 1), "") == "0,1"
    assert accelerate_gpu_ids((0, 1), "2,3") == "2,3"
    assert accelerate_gpu_ids((1,), "4, 6") == "6"
    assert accelerate_gpu_ids((0,), "GPU-8e1c2a44,GPU-77ab") == "GPU-8e1c2a44"  # UUIDs pass through
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES=5"):
        accelerate_gpu_ids((1,), "5")


def test_the_launch_command_carries_the_neutral_config_and_physical_gpu_ids(monkeypatch):
    # No GPU here: the launch is built as on a machine where torch sees the 2 GPUs of CUDA_VISIBLE_DEVICES=2,3.
    monkeypatch.setattr(update_launcher, "resolve_device", lambda spec: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    cmd, cpu = launch_prefix(load_config("tiny", ["device=cuda:1"]))
    assert not cpu and cmd[cmd.index("--gpu_ids") + 1] == "3"  # the process's cuda:1 is physical GPU 3
    config = cmd[cmd.index("--config_file") + 1]
    assert config.endswith("accelerate_neutral.yaml") and os.path.isfile(config)
    two = load_config("tiny", ["device=cuda", "update.num_processes=2"])
    cmd, _ = launch_prefix(two)
    assert cmd[cmd.index("--gpu_ids") + 1] == "2,3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    cmd, _ = launch_prefix(two)
    assert cmd[cmd.index("--gpu_ids") + 1] == "0,1"
