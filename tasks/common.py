"""What every stage task shares: the stage contract of SPEC §6 on the Prefect side.

A stage task is a thin wrapper: it builds a `thinking_seeds.pipeline.stages.Session` over the run directory, calls
`thinking_seeds.pipeline.loop.run_stage(session, stage, k)` and returns the stage's small Manifest as a dict.

Two layers decide whether a stage runs, and they agree:

1. ts_core (`run_stage`) skips a stage whose manifest is on disk, with the same config hash, the
   output files still hashing as recorded and the same upstream digests. This is what the plain
   loop relies on, and it is the ground truth.
2. Prefect caching sits on top. The cache key is
       (run id, iteration, stage, config hash, digests of the upstream manifests)
   -- no flow-run id and no task source, so re-running `train_flow` with the same run id hits the
   cache for every completed stage. Results are persisted as JSON inside the run directory
   (`runs/<id>/.prefect-results/<stage>-<k>-<hash>`), so the cache lives and dies with the run and
   needs no Prefect server database (a temporary local server is fine).

`run_task` keeps the layers consistent: before a task is called it asks ts_core whether the
stage's outputs are intact; if they are not (deleted, corrupt, torn manifest) the task is called
with `refresh_cache=True`, so a stale cache record can never stand in for missing files. After a
cache hit it compares the cached manifest with the one on disk and, if they differ (say the plain
loop redid the stage), refreshes the record from disk.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prefect import Task
from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext
from prefect.utilities.hashing import hash_objects

from thinking_seeds.pipeline.loop import run_prepare, run_stage
from thinking_seeds.store.run_dir import Manifest, RunDir
from thinking_seeds.pipeline.stages import Session, upstream_of

RESULTS_DIRNAME = ".prefect-results"

Upstream = dict[str, dict]  # "stage@k" -> manifest dict of an input stage


def manifest_digest(m: dict | Manifest) -> str:
    return (Manifest(**m) if isinstance(m, dict) else m).digest


def upstream_digests(upstream: Upstream | None) -> dict[str, str]:
    return {name: manifest_digest(m) for name, m in (upstream or {}).items()}


def upstream_from(*manifests: dict) -> Upstream:
    """{"stage@k": manifest} for the manifests a stage reads (the flow passes task results)."""
    return {f"{m['stage']}@{m['iteration']}": m for m in manifests}


@dataclass
class StageCachePolicy(CachePolicy):
    """Cache key = (run id, iteration, stage, config hash, upstream manifest digests).

    The stage is the task's name; the inputs must hold `run_dir`, `k`, `config_hash` and
    `upstream`. The key starts with `<stage>-<k>-` so the result files are readable by eye.
    """

    def compute_key(self, task_ctx: TaskRunContext, inputs: dict[str, Any], flow_parameters: dict[str, Any],
                    **kwargs: Any) -> str | None:
        stage = task_ctx.task.name
        run_id = Path(inputs["run_dir"]).name
        k = int(inputs["k"])
        ups = sorted(upstream_digests(inputs.get("upstream")).items())
        key = hash_objects(run_id, k, stage, inputs["config_hash"], ups, raise_on_failure=True)
        return f"{stage}-{k}-{key}"


STAGE_CACHE = StageCachePolicy()



def _task_run_name() -> str:
    from prefect.runtime import task_run

    return f"{task_run.task_name}-{task_run.parameters.get('k')}"


# Options shared by all stage tasks; `result_storage` is set per run by `run_task`.
STAGE_TASK_OPTIONS: dict[str, Any] = dict(
    cache_policy=STAGE_CACHE,
    persist_result=True,
    result_serializer="json",
    task_run_name=_task_run_name,
)


def execute_stage(stage: str, run_dir: str, k: int, config_hash: str, upstream: Upstream) -> dict:
    """The body of every stage task: check the inputs, run (or skip) the stage in ts_core."""
    run = RunDir(Path(run_dir))
    s = Session(run)
    try:
        if s.cfg.config_hash() != config_hash:
            raise ValueError(
                f"{run.config_path} has config hash {s.cfg.config_hash()}, the flow expected {config_hash}: "
                "the run directory was changed under the flow; re-run with the run's own preset and overrides"
            )
        expected = upstream_digests(upstream)
        on_disk = run.upstream_digests(upstream_of(stage, k))
        if expected != on_disk:
            raise RuntimeError(
                f"{stage} {k}: the upstream manifests passed by the flow {expected} differ from the ones in "
                f"{run.root} {on_disk}; another process is writing this run (see {run.root / '.lock'})"
            )
        return asdict(run_stage(s, stage, k))
    finally:
        s.close()


def execute_prepare(run_dir: str, config: dict) -> dict:
    from thinking_seeds.config import config_from_dict

    return asdict(run_prepare(RunDir(Path(run_dir)), config_from_dict(config, origin="prepare task")))


def run_task(task: Task, run: RunDir, k: int, config_hash: str, upstream: Upstream | None = None, **extra: Any) -> dict:
    """Call a stage task with the run's result storage; refresh the cache when the files say so."""
    stage = task.name
    upstream = upstream or {}
    storage = run.root / RESULTS_DIRNAME
    on_disk = run.completed(k, stage, config_hash, upstream_digests(upstream))
    args = dict(run_dir=str(run.root), k=k, config_hash=config_hash, upstream=upstream, **extra)
    m = task.with_options(result_storage=storage, refresh_cache=on_disk is None)(**args)
    if on_disk is not None and manifest_digest(m) != on_disk.digest:
        # A cache record from an earlier attempt disagrees with the run directory: the files win.
        m = task.with_options(result_storage=storage, refresh_cache=True)(**args)
    return m


def artifact_key(*parts: str | int) -> str:
    """An artifact key from parts (Prefect allows lowercase letters, digits and dashes only)."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(str(p) for p in parts).lower())).strip("-")
