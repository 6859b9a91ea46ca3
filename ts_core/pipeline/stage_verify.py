"""verify k: rewards and statuses of every response, then group-relative advantages (docs/algorithm.md §2.4),
into rollouts/iteration=k/rollouts.parquet. The trainer never sees rewards, only advantages.

With rollout.filter_groups, groups without reward variance are dropped and further rounds sampled
(pipeline/oversample.py): rollouts.parquet holds the kept groups, dropped.parquet the others. With
reward.overlong, truncated responses lose their gradient (mask) or pay a length penalty (soft) in
the advantage (algo/overlong.py); the `reward` column keeps the verifier's score."""

from __future__ import annotations

import torch

from thinking_seeds.algo.advantages import get_adv_estimator
from thinking_seeds.algo.overlong import OverlongSettings, get_overlong, is_truncated
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

    def score(batch: list[RolloutRow]) -> list:
        with t("verification"):
            verdicts = s.verifier.score_batch([r.response_text for r in batch], [by_id[r.prompt_id] for r in batch])
        for r, v in zip(batch, verdicts, strict=True):
            r.reward, r.status, r.answer = v.reward, v.status, v.answer
        return verdicts

    verdicts = score(rows)
    round0 = rows
    metrics: dict[str, float] = {}
    dropped: list[RolloutRow] = []
    if cfg.rollout.filter_groups:
        from thinking_seeds.pipeline.oversample import fill_informative  # loads the seeds/continuation bodies

        rounds = fill_informative(s, k, rows, score, t)
        rows, dropped, verdicts = rounds.kept, rounds.dropped, verdicts + rounds.verdicts
        metrics.update(rounds.metrics)
    metrics.update(assign_advantages(cfg, rows, s.tokenizer.eos_token_id))
    if cfg.loss.prefix_mismatch_metrics:
        from thinking_seeds.pipeline.prefix_mismatch import prefix_mismatch  # loads models: only when asked

        with t("prefix_mismatch"):
            metrics.update(prefix_mismatch(s, k, rows))
    with t("io"):
        path = write_rows(RolloutRow, rows, run.rollouts(k))
        m.record(run, "rollouts", path, rows=len(rows))
        if cfg.rollout.filter_groups:
            path = write_rows(RolloutRow, dropped, run.rollouts(k).with_name("dropped.parquet"))
            m.record(run, "dropped", path, rows=len(dropped))
    metrics.update({f"verify/status_{st}": float(c) for st, c in count_statuses(verdicts).items()})
    # The policy's own draw (round 0): comparable with a run without dynamic sampling.
    metrics["reward/mean"] = float(torch.tensor([r.reward for r in round0], dtype=torch.float32).mean())
    for kind in ROLLOUT_KINDS:
        rs = [r.reward for r in round0 if r.kind == kind]
        if rs:
            metrics[f"reward/{kind}"] = mean(rs)
    if s.label() is None:
        strategies = [strategy_of(r.response_text) for r in round0 if r.kind == "on_policy"]
        for st in ("a", "b", "other"):
            if strategies:
                metrics[f"rollout/strategy_{st}"] = strategies.count(st) / len(strategies)
    m.metrics = metrics
    m.seconds = t.seconds
    return m


def assign_advantages(cfg: RunConfig, rows: list[RolloutRow], eos_id: int) -> dict[str, float]:
    """Group advantages of scored `rows` (set on each), after reward.overlong; its metrics."""
    keys = [baseline_group(cfg, r) for r in rows]
    group_of = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    rewards = torch.tensor([r.reward for r in rows], dtype=torch.float32)
    groups = torch.tensor([group_of[key] for key in keys])
    on_policy = torch.tensor([r.kind == "on_policy" for r in rows])
    baseline = on_policy if cfg.advantage.baseline == "on_policy" else torch.ones_like(on_policy)
    T = cfg.rollout.max_new_tokens
    for r in rows:  # rows written before the flag existed: by length and EOS
        if r.truncated is None:
            r.truncated = is_truncated(len(r.token_ids), None, r.token_ids[-1] if r.token_ids else None, eos_id, T)
    truncated = torch.tensor([bool(r.truncated) for r in rows], dtype=torch.bool)
    lengths = torch.tensor([len(r.token_ids) for r in rows])
    settings = OverlongSettings(T, cfg.reward.overlong_buffer, cfg.reward.overlong_penalty)
    shaped, carries = get_overlong(cfg.reward.overlong)(rewards, lengths, truncated, settings)
    adv = get_adv_estimator(cfg.advantage.estimator)(shaped, groups, baseline) * carries
    for r, a in zip(rows, adv.tolist(), strict=True):
        r.advantage = a
    metrics = {
        "advantage/zero_frac": float((adv == 0).float().mean()) if len(rows) else 0.0,
        "rollout/truncated_frac": float(truncated.float().mean()) if len(rows) else 0.0,
    }
    if cfg.reward.overlong == "soft" and len(rows):
        metrics["reward/overlong_penalty"] = float((shaped - rewards).mean())
    if cfg.reward.overlong == "mask" and len(rows):
        metrics["rollout/overlong_masked_frac"] = float((~carries).float().mean())
    return metrics


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
