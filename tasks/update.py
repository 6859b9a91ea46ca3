"""Prefect task for the update stage (SPEC §2.5): θ_k + rollouts -> θ_{k+1} with the loss of SPEC §3.

With `update.launcher=accelerate` ts_core runs `accelerate launch -m thinking_seeds.train.trainer` as a
subprocess (N processes: DDP; gloo on CPU); otherwise the update runs in this process.
"""

from __future__ import annotations

from prefect import task

from .common import STAGE_TASK_OPTIONS, Upstream, execute_stage


@task(name="update", **STAGE_TASK_OPTIONS)
def update_task(run_dir: str, k: int, config_hash: str, upstream: Upstream) -> dict:
    """Run (or skip, if done) the update stage of iteration k; returns its manifest as a dict."""
    return execute_stage("update", run_dir, k, config_hash, upstream)
