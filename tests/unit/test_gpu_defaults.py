"""Issue #52 item 4: a GPU user's defaults are GPU defaults. update.mixed_precision=auto resolves to bf16 when
`device` puts the run on a CUDA GPU (bf16 engine, autocast update with fp32 masters, the trainer's π_old), to no
on the CPU; the resolved value is what config.yaml records, and a run started before auto existed (its
config.yaml says no, or lacks the key) keeps fp32 and its config hash when resumed with today's preset on a GPU.
Configs only: no GPU is needed (device=cuda is validated by its form; the device is resolved when a model is placed).
"""

from __future__ import annotations

import yaml

from thinking_seeds.config import load_config, load_saved_config, save_config
from thinking_seeds.config.run_config import keep_defaults_before
from thinking_seeds.pipeline.resume import changed_settings


def test_cuda_defaults_to_bf16_with_the_trainers_pi_old():
    cfg = load_config("tiny", ["device=cuda"])
    assert cfg.update.mixed_precision == "bf16" and cfg.engine_dtype == "bfloat16"
    assert cfg.update.recompute_old_logprobs is True and cfg.model.dtype == "float32"  # fp32 masters
    assert load_config("tiny", ["device=cuda:1"]).update.mixed_precision == "bf16"


def test_cpu_defaults_to_fp32():
    for device in ("cpu", "auto"):  # auto: this machine has no GPU torch sees
        cfg = load_config("tiny", [f"device={device}"])
        assert cfg.update.mixed_precision == "no" and cfg.engine_dtype == "float32", device
        assert cfg.update.recompute_old_logprobs is False


def test_an_explicit_choice_or_bf16_weights_stay_as_set():
    assert load_config("tiny", ["device=cuda", "update.mixed_precision=no"]).update.mixed_precision == "no"
    bf16_weights = load_config("tiny", ["device=cuda", "model.dtype=bfloat16"])
    assert bf16_weights.update.mixed_precision == "no"  # bf16 weights: no autocast over them (refused if set)
    assert load_config("tiny", ["device=cpu", "update.mixed_precision=bf16"]).update.mixed_precision == "bf16"


def test_the_resolved_precision_is_recorded(tmp_path):
    save_config(load_config("tiny", ["device=cuda"]), tmp_path / "config.yaml")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["update"]["mixed_precision"] == "bf16"
    assert load_saved_config(tmp_path / "config.yaml", check_outside=False).update.mixed_precision == "bf16"


def test_an_old_run_resumed_on_a_gpu_keeps_fp32_and_its_hash(tmp_path):
    old = load_config("tiny", ["device=cuda", "update.mixed_precision=no"])  # what every run was before auto
    assert old.config_hash() == load_config("tiny", ["device=cpu"]).config_hash()  # CPU runs hash as before
    save_config(old, tmp_path / "config.yaml")
    data = yaml.safe_load((tmp_path / "config.yaml").read_text())
    del data["update"]["mixed_precision"]  # and written before the key existed
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(data))
    for path in (tmp_path / "config.yaml", tmp_path / "old.yaml"):
        saved = load_saved_config(path, check_outside=False)
        assert saved.update.mixed_precision == "no" and saved.config_hash() == old.config_hash()
        today = load_config("tiny", ["device=cuda"])  # today's default on a GPU is bf16 ...
        assert today.config_hash() != old.config_hash()
        kept = keep_defaults_before(saved, today)  # ... and the old run continues in fp32, as it started
        assert kept.update.mixed_precision == "no" and kept.update.recompute_old_logprobs is False
        assert changed_settings(saved, kept) == {} and kept.config_hash() == old.config_hash()


def test_bf16_on_cuda_turns_on_tf32_and_fp32_keeps_exact_matmuls():
    """The update's autocast (train/micro_loss.py) on a CUDA model: TF32 for what autocast leaves in fp32; with
    mixed_precision=no nothing changes. No GPU here: a stand-in whose parameters say they are on CUDA."""
    import types
    import warnings

    import torch

    from thinking_seeds.train.micro_loss import autocast

    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    on_cuda = types.SimpleNamespace(parameters=lambda: iter([types.SimpleNamespace(device=torch.device("cuda", 0))]))
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        with autocast(load_config("tiny", ["device=cuda", "update.mixed_precision=no"]), on_cuda):
            pass
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.autocast("cuda") without a GPU warns and disables itself
            with autocast(load_config("tiny", ["device=cuda"]), on_cuda):
                pass
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
