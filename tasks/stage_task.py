"""One Prefect task per stage of docs/algorithm.md §2, all made by `stage_task(name)`.

A stage task takes this process's Session over the run directory (`session_for`: one per run, as
in the plain loop) and asks `thinking_seeds.pipeline.loop` to run
the stage or skip it; the run directory's manifests are the only record of what is done (the plain
loop reads the same ones). Prefect keeps no cache and persists no results: it shows what happened.
A skipped stage's task run ends in a Completed-type state named "Skipped" whose message says
"skipped (manifest)"; a stage that ran ends in "Completed".

The flow passes each task the manifests (as dicts) of the stages it reads, and the task checks them
against the run directory before it does anything: two processes writing one run would otherwise
mix their outputs.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed

from thinking_seeds.config import config_from_dict
from thinking_seeds.pipeline.graph import upstream_of
from thinking_seeds.pipeline.loop import Outcome, prepare_outcome, stage_outcome
from thinking_seeds.pipeline.session import session_for
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.run_dir import RunDir

Upstream = dict[str, dict]  # "stage@k" -> manifest dict of an input stage

SKIPPED = "Skipped"  # the state name of a stage whose manifest vouched for its outputs


def _outcome(stage: str, run_dir: str, k: int, config_hash: str, upstream: Upstream, config: dict | None) -> Outcome:
    run = RunDir(Path(run_dir))
    if stage == "prepare":  # writes config.yaml, so the config comes from the flow
        return prepare_outcome(run, config_from_dict(config, origin="prepare task"))
    s = session_for(run)
    if s.cfg.config_hash() != config_hash:
        raise ValueError(
            f"{run.config_path} has config hash {s.cfg.config_hash()}, the flow expected {config_hash}: "
            "the run directory was changed under the flow; re-run with the run's own preset and overrides"
        )
    expected = {name: Manifest(**m).digest for name, m in upstream.items()}
    on_disk = run.upstream_digests(upstream_of(stage, k))
    if expected != on_disk:
        raise RuntimeError(
            f"{stage} {k}: the upstream manifests passed by the flow {expected} differ from the ones in "
            f"{run.root} {on_disk}; another process is writing this run (see {run.root / '.lock'})"
        )
    return stage_outcome(s, stage, k)


def stage_task(stage: str) -> Task:
    """The Prefect task of `stage`: (run_dir, k, config_hash, upstream[, config]) -> the manifest as a dict.

    Task runs are named `<stage>-<k>`, and an evaluation after the policy it evaluates: `evaluate-θ0`
    (k = -1), `evaluate-θ<k+1>` (iteration k's). Call it with `return_state=True` and take `.result()`: a
    skipped stage returns its state, not only its value.
    """

    def run_stage_task(run_dir: str, k: int, config_hash: str, upstream: Upstream, config: dict | None = None):
        m, skipped = _outcome(stage, run_dir, k, config_hash, upstream, config)
        if not skipped:
            return asdict(m)
        why = f"skipped (manifest): {stage} {k} is complete in {run_dir}, outputs intact"
        get_run_logger().debug(why)  # one resume line says it for the whole run (pipeline/resume.py)
        return Completed(name=SKIPPED, message=why, data=asdict(m))

    # Prefect keys a task by its function's qualified name: one per stage, as with hand-written tasks.
    run_stage_task.__name__ = run_stage_task.__qualname__ = f"{stage}_task"
    run_stage_task.__doc__ = f"Run (or skip, if its manifest says it is done) the {stage} stage of iteration k."
    name = _evaluated_policy if stage == "evaluate" else stage + "-{k}"
    return task(name=stage, task_run_name=name, cache_policy=NO_CACHE, persist_result=False)(run_stage_task)


def _evaluated_policy() -> str:
    """The evaluation's task run name: the policy it evaluates, θ_{k+1} (θ_0 at k = -1), as the docs write it."""
    from prefect.runtime import task_run

    return f"evaluate-θ{task_run.parameters['k'] + 1}"


def call_stage(stage: Task, run: RunDir, k: int, config_hash: str, *inputs: dict, **extra) -> tuple[dict, bool]:
    """Run one stage task in the flow: (its manifest as a dict, whether it was skipped); `inputs` are the
    manifests it reads."""
    upstream = {f"{m['stage']}@{m['iteration']}": m for m in inputs}
    state = stage(str(run.root), k, config_hash, upstream, **extra, return_state=True)
    return state.result(), state.name == SKIPPED
