"""Issue #16 on a CPU, what runs: the explicit device (`device=cpu`) places the engine and the
trainer; bf16 autocast with fp32 master weights trains (finite loss and ratios) and the trainer's
π_old recompute gives on-policy ratios of exactly 1 on unchanged weights; importing every module
touches no CUDA. The settings: unit/test_device.py; bf16 under `accelerate launch`:
e2e/test_update_processes.py.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

from tests.helpers import REPO
from tests.helpers.update_run import DEVICE_UPDATE, update_done, verified_session
from thinking_seeds.pipeline.session import Session

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
import sys, thinking_seeds.flows.train, thinking_seeds.tasks  # the Prefect layers too
assert not calls, f"CUDA touched at import by thinking_seeds: {calls}"
# cluster=local never needs Ray: no module imports it at import time (only inside functions, issue #14).
assert "ray" not in sys.modules, "importing thinking_seeds imported ray"
print(len(names))
"""


def test_no_module_touches_cuda_or_imports_ray_at_import():
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


def test_explicit_cpu_device_runs(tmp_path, tiny_overrides):
    run, cfg, s = verified_session(tmp_path, tiny_overrides + DEVICE_UPDATE + ["device=cpu"])
    try:
        eng = s.engine()
        assert eng.device == torch.device("cpu") and next(eng.model.parameters()).dtype == torch.float32
        m = update_done(s, 0)
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
    )
    from thinking_seeds.train.update_loop import plan

    overrides = tiny_overrides + DEVICE_UPDATE + ["device=cpu", "update.mixed_precision=bf16"]
    run, cfg, s = verified_session(tmp_path, overrides)
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
    (mini, micro), *_ = plan(batch, cfg, 0, 0, 1)  # the update's own schedule (a token budget by default)
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
    m = update_done(Session(run, cfg), 0)
    assert all(math.isfinite(v) for v in m.metrics.values()), m.metrics
    assert m.metrics["actor/engine_logprob_diff/max"] > 0
    w = load_file(str(run.policy(1) / "model.safetensors"))
    assert {t.dtype for t in w.values()} == {torch.float32}
    opt = load_file(str(run.policy(1) / "optimizer.safetensors"))
    assert {t.dtype for k, t in opt.items() if "exp_avg" in k} == {torch.float32}
    w0 = load_file(str(run.policy(0) / "model.safetensors"))
    assert any(not torch.equal(w0[k], w[k]) for k in w), "the bf16 update did not move the weights"
