"""Prefect task for the snapshot stage (SPEC §2.1): every `pool.snapshot_every` iterations θ_k
joins the historical pool H."""

from __future__ import annotations

from prefect import task

from .common import STAGE_TASK_OPTIONS, Upstream, execute_stage


@task(name="snapshot", **STAGE_TASK_OPTIONS)
def snapshot_task(run_dir: str, k: int, config_hash: str, upstream: Upstream) -> dict:
    """Run (or skip, if done) the snapshot stage of iteration k; returns its manifest as a dict."""
    return execute_stage("snapshot", run_dir, k, config_hash, upstream)
