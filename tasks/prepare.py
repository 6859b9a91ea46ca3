"""Prefect task for the prepare stage: config.yaml, the data splits and θ_0 (once per run)."""

from __future__ import annotations

from prefect import task

from .common import STAGE_TASK_OPTIONS, Upstream, execute_prepare


@task(name="prepare", **STAGE_TASK_OPTIONS)
def prepare_task(run_dir: str, k: int, config_hash: str, upstream: Upstream, config: dict) -> dict:
    """Write the run's config, data splits and θ_0 unless done; returns the manifest as a dict.

    `k` is always 0 and `upstream` empty (uniform signature for the cache key); `config` is the
    validated RunConfig as a dict, keyed by `config_hash`.
    """
    return execute_prepare(run_dir, config)
