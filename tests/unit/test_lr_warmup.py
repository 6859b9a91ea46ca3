"""update.lr_warmup_steps: the lr of each optimizer step, counted by AdamW itself (so a reloaded
optimizer goes on ramping where it stopped), and the config hash of runs that leave it at 0."""

from __future__ import annotations

import torch

from thinking_seeds.config import load_config
from thinking_seeds.train.update_loop import set_warmup_lr


def _steps(opt, model, n, lr, warmup):
    used = []
    for _ in range(n):
        opt.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        set_warmup_lr(opt, lr, warmup)
        used.append(opt.param_groups[0]["lr"])
        opt.step()
    return used


def test_linear_ramp_then_constant_and_resumes_from_adamws_counter():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    assert _steps(opt, model, 3, 1e-3, 4) == [2.5e-4, 5e-4, 7.5e-4]
    saved = opt.state_dict()
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fresh.load_state_dict(saved)  # a checkpoint's AdamW state: step 3 done
    assert _steps(fresh, model, 3, 1e-3, 4) == [1e-3, 1e-3, 1e-3]


def test_no_warmup_leaves_the_lr_alone():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    assert _steps(opt, model, 2, 1e-3, 0) == [3e-4, 3e-4]  # the optimizer's own lr, untouched


def test_hash_unchanged_at_zero_and_changed_when_set():
    base = load_config("tiny", [])
    assert load_config("tiny", ["update.lr_warmup_steps=0"]).config_hash() == base.config_hash()
    assert load_config("tiny", ["update.lr_warmup_steps=4"]).config_hash() != base.config_hash()
