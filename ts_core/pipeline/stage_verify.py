"""verify k: rewards and statuses of every response, then group-relative advantages (docs/algorithm.md §2.4),
into rollouts/iteration=k/rollouts.parquet. The trainer never sees rewards, only advantages."""

from __future__ import annotations

import torch

from thinking_seeds.algo.advantages import get_adv_estimator
from thinking_seeds.config import RunConfig
from thinking_seeds.data.chain_sum import strategy_of
from thinking_seeds.data.rewards import count_statuses
from thinking_seeds.pipeline.rows import RolloutRow, read_rows, write_rows
from thinking_seeds.pipeline.session import Session, Timer, mean
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.schemas import ROLLOUT_KINDS


def verify(s: Session, k: int) -> Manifest:
    cfg, run = s.cfg, s.run
    m = Manifest("verify", k, cfg.config_hash())
    t = Timer()
    with t("io"):
        rows = read_rows(RolloutRow, run.generated(k))
    by_id = {p.prompt_id: p for p in s.prompts("train")}
    with t("verification"):
        verdicts = s.verifier.score_batch([r.response_text for r in rows], [by_id[r.prompt_id] for r in rows])
    for r, v in zip(rows, verdicts, strict=True):
        r.reward, r.status, r.answer = v.reward, v.status, v.answer
    keys = [baseline_group(cfg, r) for r in rows]
    group_of = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    rewards = torch.tensor([r.reward for r in rows], dtype=torch.float32)
    groups = torch.tensor([group_of[key] for key in keys])
    on_policy = torch.tensor([r.kind == "on_policy" for r in rows])
    baseline = on_policy if cfg.advantage.baseline == "on_policy" else torch.ones_like(on_policy)
    adv = get_adv_estimator(cfg.advantage.estimator)(rewards, groups, baseline)
    for r, a in zip(rows, adv.tolist(), strict=True):
        r.advantage = a
    with t("io"):
        path = write_rows(RolloutRow, rows, run.rollouts(k))
    m.record(run, "rollouts", path, rows=len(rows))
    metrics = {f"verify/status_{st}": float(c) for st, c in count_statuses(verdicts).items()}
    metrics["reward/mean"] = float(rewards.mean())
    for kind in ROLLOUT_KINDS:
        rs = [r.reward for r in rows if r.kind == kind]
        if rs:
            metrics[f"reward/{kind}"] = mean(rs)
    if s.label() is None:
        strategies = [strategy_of(r.response_text) for r in rows if r.kind == "on_policy"]
        for st in ("a", "b", "other"):
            if strategies:
                metrics[f"rollout/strategy_{st}"] = strategies.count(st) / len(strategies)
    metrics["advantage/zero_frac"] = float((adv == 0).float().mean())
    m.metrics = metrics
    m.seconds = t.seconds
    return m


def baseline_group(cfg: RunConfig, row: RolloutRow) -> tuple:
    """The group whose statistics form a sample's advantage baseline.

    Normally the prompt. With advantage.baseline=same_seed, a seeded sample's group is the
    continuations of its own seed (the continuation stage lays a group out as n_on on-policy
    samples, then each seed `continuations_per_seed` times in a row), and on-policy samples form
    their own group: a continuation of a draft that already went wrong is no longer judged
    against samples that never saw it.
    """
    if cfg.advantage.baseline != "same_seed" or row.kind == "on_policy":
        return (row.prompt_id, "all" if cfg.advantage.baseline != "same_seed" else "on_policy")
    n_on = cfg.rollout.group_size - cfg.rollout.seeds_per_group
    return (row.prompt_id, "seed", (row.sample_id - n_on) // cfg.rollout.continuations_per_seed)
