"""Prefect task for the verify stage (SPEC §2.4): rewards, statuses and group-relative advantages.

Writes rollouts/iteration=k/rollouts.parquet.
"""

from __future__ import annotations

from prefect import task

from .common import STAGE_TASK_OPTIONS, Upstream, execute_stage


@task(name="verify", **STAGE_TASK_OPTIONS)
def verify_task(run_dir: str, k: int, config_hash: str, upstream: Upstream) -> dict:
    """Run (or skip, if done) the verify stage of iteration k; returns its manifest as a dict."""
    return execute_stage("verify", run_dir, k, config_hash, upstream)
