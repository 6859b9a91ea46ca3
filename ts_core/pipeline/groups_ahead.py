"""Bounded-staleness rollouts (pipeline.max_staleness = s > 0): iteration k+1's groups sampled while
update k runs.

With s > 0 the on-policy samples and continuations of iteration k are θ_{k-s}'s (graph.rollout_step).
Those of iteration k+1 need θ_{k+1-s}, which exists before update k starts (s >= 1), and the seeds
k+1, whose writers are pool snapshots older than θ_{k+1} (pipeline/seeds_ahead.py). So while update k
runs, a thread of the pipeline's process drafts seeds k+1 (`stage_seeds.draft_ahead`) and then continues
them and samples the on-policy slots (`stage_continuation.sample_ahead`: the stage's own body, with its
seed): the same rows the continuation stage k+1 would sample in its turn, bit for bit. This module
holds them in between.

As with the seeds, nothing is written ahead: the rows wait here, in memory, tagged with the policy
that sampled them and the seeds they continued; the continuation stage k+1 takes them (`take_groups`)
if both are still what it would use, else samples again. A run killed meanwhile loses only work in
memory, and its manifests stay the one record of what is done.

Sampling beside the update must not need the trainer (it is busy): θ_{k+1-s} must be in memory or in
a valid checkpoint (`policy_at_hand`; after a resume it may be neither, and the stage samples in its
turn): `stage_continuation.prepare_ahead` checks this in the main thread. In process the engine's θ_k
is the trainer's own tensors, which update k changes in place: they are copied first
(`live_weights.keep_copy`, one copy of θ per iteration; the persistent trainer's arrive as bytes).
Not sampled ahead: prefix.source=dataset (its seeds are not drafted ahead; the stage samples them in
its turn, by θ_{k-s} all the same) and iteration 0 (θ_0 samples it, and nothing runs before).
prefix.when=on_failure is refused by the config with max_staleness.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from thinking_seeds.config import RunConfig
from thinking_seeds.pipeline.graph import rollout_step
from thinking_seeds.pipeline.policy_chain import policy_id
from thinking_seeds.pipeline.rows import PrefixRow, RolloutRow
from thinking_seeds.pipeline.run_resources import resources_for
from thinking_seeds.pipeline.session import Session

log = logging.getLogger(__name__)


@dataclass
class GroupsAhead:
    """Iteration k's sampled groups (pending verification), what sampled them, and the seconds it took."""

    rows: list[RolloutRow]
    generated: int
    policy: str  # policy_id of θ_{k-s}
    prefixes: list[PrefixRow]  # the seeds they continue, as the seeds stage will write them
    seconds: dict[str, float]


def staleness_due(cfg: RunConfig, k: int) -> bool:
    """Whether to sample iteration k+1's groups while update k runs."""
    return cfg.pipeline.max_staleness > 0 and 0 <= k < cfg.iterations - 1


def put_groups(s: Session, k: int, ahead: GroupsAhead) -> None:
    resources_for(s.run).groups_ahead.put(s, k, ahead)


def take_groups(s: Session, k: int, prefixes: list[PrefixRow]) -> GroupsAhead | None:
    """Groups k sampled ahead, if by the policy the stage would use and from exactly these seeds (once)."""
    ahead = resources_for(s.run).groups_ahead.take(s, k)
    if ahead is not None and (ahead.policy != policy_id(s.run, rollout_step(s.cfg, k)) or ahead.prefixes != prefixes):
        log.warning("continuation %d: its policy or seeds changed since it was sampled ahead; sampling again", k)
        return None
    return ahead
