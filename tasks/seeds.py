"""Prefect task for the seeds stage (SPEC §2.2): pool checkpoints write drafts, cut at λ·|z|.

Writes corpus/prefixes/iteration=k/prefixes.parquet (empty manifest for on-policy methods).
"""

from __future__ import annotations

from prefect import task

from .common import STAGE_TASK_OPTIONS, Upstream, execute_stage


@task(name="seeds", **STAGE_TASK_OPTIONS)
def seeds_task(run_dir: str, k: int, config_hash: str, upstream: Upstream) -> dict:
    """Run (or skip, if done) the seeds stage of iteration k; returns its manifest as a dict."""
    return execute_stage("seeds", run_dir, k, config_hash, upstream)
