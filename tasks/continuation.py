"""Prefect task for the continuation stage (SPEC §2.3): θ_k samples the on-policy responses and
continues every seed.

Writes rollouts/iteration=k/generated.parquet.
"""

from __future__ import annotations

from prefect import task

from .common import STAGE_TASK_OPTIONS, Upstream, execute_stage


@task(name="continuation", **STAGE_TASK_OPTIONS)
def continuation_task(run_dir: str, k: int, config_hash: str, upstream: Upstream) -> dict:
    """Run (or skip, if done) the continuation stage of iteration k; returns its manifest as a dict."""
    return execute_stage("continuation", run_dir, k, config_hash, upstream)
