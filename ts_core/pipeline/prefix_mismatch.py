"""loss.prefix_mismatch_metrics: the prefix's π_θ/π_h gap split into its two factors, by source age.

A seed's behaviour log-probs were written by the *engine* sampling π_h, so log π_θ − log π_h on a
prefix mixes (1) how far the historical policy h is from θ_k (its age) and (2) how far the engine's
numerics are from the trainer's. Rescoring each prefix with π_h in the trainer's own forward (its
device and precision: bf16 autocast under update.mixed_precision=bf16) separates them:

    age factor      log π_θk(trainer) − log π_h(trainer)    rollout_corr/prefix_age_*/age=A
    engine factor   log π_h(trainer)  − log π_h(engine)     rollout_corr/prefix_engine_*/age=A

each as k1/k3 KL estimates over the prefix tokens (samples from π_h) and max |log ratio|
(algo/rollout_correction.mismatch_metrics). Cost: one no-grad forward over the prefixes of every
pool member that wrote one, and one of θ_k over all prefixes, each model loaded once per iteration
(the verify stage, where the rollouts are final); off by default.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch

from thinking_seeds.algo.rollout_correction import mismatch_metrics
from thinking_seeds.engine.lora import load_policy
from thinking_seeds.engine.models import resolve_device
from thinking_seeds.engine.scoring import score_responses
from thinking_seeds.pipeline.rows import RolloutRow
from thinking_seeds.pipeline.session import Session
from thinking_seeds.transports import live_weights


def _trainer_logprobs(s: Session, path, rows: list[RolloutRow]) -> list[list[float]]:
    """log π(prefix tokens) under the checkpoint at `path`, in the trainer's numerics."""
    cfg = s.cfg
    device = resolve_device(cfg.device)
    live = live_weights.lookup(path)
    if live is not None:  # θ_k between checkpoints (checkpoint.every): the trainer's weights, held in memory
        model, tok = load_policy(s.run.policy(0), cfg.model.dtype, cfg.model.lora)
        model.load_state_dict(live.state, strict=False)
        model.tie_weights()
    else:
        model, tok = load_policy(path, cfg.model.dtype, cfg.model.lora)
    model.to(device).eval()
    bf16 = cfg.update.mixed_precision == "bf16"
    amp = torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    out: list[list[float]] = []
    mb = cfg.update.micro_batch_size
    with torch.no_grad(), amp:
        for a in range(0, len(rows), mb):
            part = rows[a : a + mb]
            sc = score_responses(
                model,
                [r.prompt_token_ids for r in part],
                [r.token_ids[: r.prefix_len] for r in part],
                pad_id=tok.pad_token_id,
                temperature=cfg.rollout.temperature,
                with_entropy=False,
            )
            lp = sc.logprobs.float().cpu()
            out += [lp[i, : r.prefix_len].tolist() for i, r in enumerate(part)]
    return out


def prefix_mismatch(s: Session, k: int, rows: list[RolloutRow]) -> dict[str, float]:
    """The two factors' metrics by source age over the seeded rows written by pool checkpoints."""
    seeded = [r for r in rows if r.prefix_len > 0 and r.source_step is not None and r.source_step >= 0]
    if not seeded:
        return {}
    _, members = s.pool_members(k)
    paths = {c.step: c.path for c in members}
    paths.setdefault(k, s.policy(k))  # iteration 0: θ_0 writes its own seeds
    by_source: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(seeded):
        by_source[r.source_step].append(i)
    h_lp: list[list[float]] = [[] for _ in seeded]
    for step, idx in sorted(by_source.items()):
        for i, lp in zip(idx, _trainer_logprobs(s, paths[step], [seeded[i] for i in idx]), strict=True):
            h_lp[i] = lp
    theta_lp = _trainer_logprobs(s, s.policy(k), seeded)
    metrics: dict[str, float] = {}
    by_age: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(seeded):
        by_age[k - r.source_step].append(i)
    for age, idx in sorted(by_age.items()):
        h = torch.tensor([x for i in idx for x in h_lp[i]], dtype=torch.float64)
        eng = torch.tensor([x for i in idx for x in seeded[i].behaviour_logprobs[: seeded[i].prefix_len]])
        th = torch.tensor([x for i in idx for x in theta_lp[i]], dtype=torch.float64)
        mask = torch.ones_like(h, dtype=torch.bool)
        for name, lr in (("age", th - h), ("engine", h - eng.double())):
            for key, v in mismatch_metrics(lr, mask, prefix="x").items():
                metrics[f"rollout_corr/prefix_{name}_{key.split('/', 1)[1]}/age={age}"] = v
    return metrics
