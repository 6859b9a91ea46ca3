"""Seeds sampled ahead (pipeline.overlap): iteration k+1's drafts while update k runs.

The seeds of iteration k+1 are written by pool members, snapshots strictly older than θ_{k+1}
(`HistoricalPool.members`): all of them are on disk once snapshot k is done, so they can be sampled
before update k ends, with the same seeds and weights, hence the same samples. Only iteration 0
must wait: no snapshot is older than θ_0 there, and θ_0 writes its own seeds.

`stage_seeds.draft_ahead(s, k)` computes the rows of seeds k and keeps them here, in this process
(`put_ahead`), with a fingerprint of the pool members that wrote them; the seeds stage then takes
them (`take_ahead`) instead of sampling, and writes them and its manifest as always, after update
k-1, evaluate and snapshot k. Nothing is written ahead, so the manifests stay the only record of
what is done: a run killed while sampling ahead loses the drafts and samples them again in its seeds
stage. The plain loop and the Prefect flow sample in a thread beside update k
(`run_lifecycle.sampled_ahead`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from thinking_seeds.config import RunConfig
from thinking_seeds.pipeline.rows import PrefixRow
from thinking_seeds.pipeline.run_resources import resources_for
from thinking_seeds.pipeline.seed_files import Prepared
from thinking_seeds.pipeline.session import Session
from thinking_seeds.store.checkpoints import CheckpointInfo

log = logging.getLogger(__name__)

Fingerprint = tuple[tuple[int, tuple[tuple[str, str], ...]], ...]


@dataclass
class Ahead:
    """Iteration k's seed rows, the pool members that wrote them, the seconds each part took."""

    rows: list[PrefixRow]
    members: Fingerprint
    seconds: dict[str, float]
    banked: bool = False  # drafted with an earlier iteration's seeds (pipeline.seeds_block): no seconds here
    files: Prepared | None = None  # the stage's two files, computed beside the update (pipeline/seed_files.py)


def overlap_on(cfg: RunConfig) -> bool:
    """pipeline.overlap, or when unset: on when this process samples on the CPU (HF engine or vLLM:
    where it was measured, BENCHMARKS.md), off on a GPU and on Ray."""
    if cfg.pipeline.overlap is not None:
        return cfg.pipeline.overlap
    if cfg.cluster.kind != "local":
        return False
    from thinking_seeds.engine.models import resolve_device  # torch: only once a run asks

    return resolve_device(cfg.device).type == "cpu"


def overlap_due(cfg: RunConfig, k: int) -> bool:
    """Whether to sample iteration k+1's seeds while update k runs (the pool's check comes later)."""
    return cfg.seeded and cfg.prefix.source == "historical" and 0 <= k < cfg.iterations - 1 and overlap_on(cfg)


def fingerprint(members: list[CheckpointInfo]) -> Fingerprint:
    """The pool members by step and file hashes: drafts from other weights are not these seeds."""
    return tuple((c.step, tuple(sorted(c.sha256.items()))) for c in sorted(members, key=lambda c: c.step))


def put_ahead(s: Session, k: int, ahead: Ahead) -> None:
    resources_for(s.run).seeds_ahead.put(s, k, ahead)


def has_ahead(s: Session, k: int) -> bool:
    return resources_for(s.run).seeds_ahead.has(s, k)


def peek_ahead(s: Session, k: int) -> Ahead | None:
    """The drafts of seeds k if they are held, left in place for the seeds stage (bounded staleness
    continues them before that stage writes them: pipeline/groups_ahead.py)."""
    return resources_for(s.run).seeds_ahead.peek(s, k)


def take_ahead(s: Session, k: int, members: list[CheckpointInfo]) -> Ahead | None:
    """The drafts of seeds k if they were drafted ahead by exactly these pool members (once)."""
    ahead = resources_for(s.run).seeds_ahead.take(s, k)
    if ahead is not None and ahead.members != fingerprint(members):
        log.warning("seeds %d: the pool changed since its seeds were drafted ahead; sampling them again", k)
        return None
    return ahead
