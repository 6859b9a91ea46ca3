"""update.lr_warmup_steps on a real update: the tiny run's first update (two AdamW steps) moves θ by
about lr per weight without a warm-up, and by ~1/N of that with a warm-up of N steps."""

from __future__ import annotations

import shutil

import torch
from safetensors.torch import load_file

from tests.helpers.update_run import update_done
from thinking_seeds.config.loading import save_config
from thinking_seeds.pipeline.policy_chain import forget_run
from thinking_seeds.pipeline.session import Session
from thinking_seeds.store.run_dir import RunDir


def _theta_1(run: RunDir, cfg, tmp_path, warmup: int) -> dict[str, torch.Tensor]:
    dst = RunDir(tmp_path / f"warmup{warmup}" / run.run_id)
    shutil.copytree(run.root, dst.root)
    c = cfg.model_copy(deep=True)
    c.update.launcher, c.update.lr_warmup_steps = "in_process", warmup
    save_config(c, dst.config_path)  # the trainer reads the run's saved config
    s = Session(dst, c)
    try:
        update_done(s, 0)
    finally:
        s.close()
        forget_run(dst)
    return load_file(str(dst.policy(1) / "model.safetensors"))


def test_warmup_scales_the_first_steps(verified_run, tmp_path):
    run, cfg = verified_run
    theta_0 = load_file(str(run.policy(0) / "model.safetensors"))

    def moved(theta):
        return torch.cat([(theta[k] - theta_0[k]).abs().flatten() for k in theta_0]).mean().item()

    plain = moved(_theta_1(run, cfg, tmp_path, 0))
    ramped = moved(_theta_1(run, cfg, tmp_path, 1000))  # steps 1 and 2 at lr/1000 and 2·lr/1000
    assert plain > 1e-5
    assert ramped < plain / 100, (plain, ramped)
