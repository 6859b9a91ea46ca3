"""Prefect tasks of work sampled ahead while update k-1 runs in the flow: iteration k's seeds
(pipeline.overlap), or its seeds and groups (pipeline.max_staleness). Never stages: no manifests."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from thinking_seeds.pipeline.session import session_for
from thinking_seeds.pipeline.stage_continuation import sample_ahead
from thinking_seeds.pipeline.stage_seeds import draft_ahead
from thinking_seeds.store.run_dir import RunDir


@task(name="seeds-ahead", task_run_name="seeds-ahead-{k}", cache_policy=NO_CACHE, persist_result=False)
def seeds_ahead_task(run_dir: str, k: int) -> bool:
    """Sample the seeds of iteration k now and keep them in this process for the seeds task k, which
    writes them in its turn (pipeline/seeds_ahead.py); whether it did. Never a stage: no manifest."""
    return draft_ahead(session_for(RunDir(Path(run_dir))), k)


@task(name="groups-ahead", task_run_name="groups-ahead-{k}", cache_policy=NO_CACHE, persist_result=False)
def groups_ahead_task(run_dir: str, k: int) -> bool:
    """Draft the seeds and sample the groups of iteration k with θ_{k-s} now, and keep them in this process
    for the seeds and continuation tasks k (pipeline/groups_ahead.py); whether it did. The flow calls
    `prepare_ahead` before submitting it, in its own thread."""
    return sample_ahead(session_for(RunDir(Path(run_dir))), k)
