"""Dynamic sampling's rounds (rollout.filter_groups; the rule in algo/dynamic_sampling.py).

The verify stage scores round 0 (the continuation stage's groups), then, while fewer than
`prompts_per_iteration` groups are informative and `rollout.max_rounds` allows, draws the missing
number of further prompts from the training split (not yet used this iteration), drafts their seeds
on demand with the same pool (stage_seeds.prefixes_for) and samples their groups with θ_k
(stage_continuation.sample_groups), then scores them. Every draw and sample of round r has its own
seed, derived from (run seed, iteration, round): a rerun of the stage, after a crash, computes the
very same rounds, so resume stays bit-identical. Drafting on demand (rather than drafting for an
over-sampled prompt list in the seeds stage) pays for seeds only where a round actually runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from thinking_seeds.algo.dynamic_sampling import informative_groups, round_quota
from thinking_seeds.data.sources import Prompt
from thinking_seeds.pipeline.graph import stage_seed
from thinking_seeds.pipeline.rows import RolloutRow
from thinking_seeds.pipeline.session import Session, Timer
from thinking_seeds.pipeline.stage_continuation import sample_groups
from thinking_seeds.pipeline.stage_seeds import prefixes_for


@dataclass
class Rounds:
    kept: list[RolloutRow]
    dropped: list[RolloutRow]
    verdicts: list = field(default_factory=list)  # of the later rounds (round 0's are the caller's)
    metrics: dict[str, float] = field(default_factory=dict)


def extra_prompts(s: Session, k: int, r: int, used: set[str], n: int) -> list[Prompt]:
    """Round r's prompts: n training prompts not used yet this iteration, a seeded draw."""
    pool = [p for p in s.prompts("train") if p.prompt_id not in used]
    rng = random.Random(f"{s.cfg.data.seed}/{s.cfg.seed}/prompts/{k}/round{r}")
    return rng.sample(pool, min(n, len(pool)))


def fill_informative(
    s: Session, k: int, rows: list[RolloutRow], score: Callable[[list[RolloutRow]], list], t: Timer
) -> Rounds:
    """Round 0's scored `rows` in, the kept and dropped rows of every round out (see the module doc).

    `score(rows)` sets reward/status/answer on rows and returns their verdicts (the verify stage's)."""
    cfg = s.cfg
    target = len({r.prompt_id for r in rows})
    info = informative_groups([r.prompt_id for r in rows], [r.reward for r in rows])
    kept = [r for r in rows if info[r.prompt_id]]
    dropped = [r for r in rows if not info[r.prompt_id]]
    n_groups, n_kept, used = len(info), sum(info.values()), set(info)
    out = Rounds(kept, dropped)
    rounds, extra_tokens = 1, 0
    while n_kept < target and rounds < cfg.rollout.max_rounds:
        prompts = extra_prompts(s, k, rounds, used, round_quota(target, n_kept))
        if not prompts:
            break  # the training split is used up
        tag = f"/round{rounds}"
        pre = prefixes_for(s, k, prompts, tag, t)
        new, generated = sample_groups(s, k, prompts, pre, stage_seed(cfg, k, "continuation" + tag), t)
        # Draft tokens count too (a whole draft, or up to its cut with prefix.ratio_of=budget).
        extra_tokens += generated + sum(p.draft_len for p in pre if p.source_step >= 0)
        out.verdicts += score(new)
        info = informative_groups([r.prompt_id for r in new], [r.reward for r in new])
        out.kept += [r for r in new if info[r.prompt_id]]
        out.dropped += [r for r in new if not info[r.prompt_id]]
        n_groups, n_kept, used = n_groups + len(info), n_kept + sum(info.values()), used | set(info)
        rounds += 1
    if not out.kept:  # nothing informative in any round: train round 0 as it is (zero advantages)
        out.kept, out.dropped = rows, out.dropped[len(rows) :]  # round 0's rows were all dropped
    out.metrics = {
        "rollout/filter_groups/rounds": float(rounds),  # verl: num_gen_batches
        "rollout/filter_groups/groups": float(n_groups),
        "rollout/filter_groups/kept_groups": float(n_kept),
        "rollout/filter_groups/dropped_frac": (n_groups - n_kept) / max(1, n_groups),
        "rollout/filter_groups/extra_tokens": float(extra_tokens),
    }
    return out
