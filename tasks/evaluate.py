"""Prefect tasks for evaluation: the evaluate stage of an iteration, and a checkpoint evaluation.

- `evaluate_task`: the stage (SPEC §2.6) — held-out accuracy and pass@k of θ_{k+1} every
  `eval.every` iterations (k = -1 evaluates θ_0); cached like every stage.
- `evaluate_checkpoint_task`: any policy checkpoint of a run (default the latest) on a chosen
  split, for the nightly `evaluate_flow`; writes metrics/iteration=<step>/evaluate-<split>.parquet.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task

from ts_core.checkpoints import list_checkpoints
from ts_core.config import load_saved_config
from ts_core.run_dir import RunDir
from ts_core.stages import Session, Timer, evaluate_policy

from .common import STAGE_TASK_OPTIONS, Upstream, execute_stage


@task(name="evaluate", **STAGE_TASK_OPTIONS)
def evaluate_task(run_dir: str, k: int, config_hash: str, upstream: Upstream) -> dict:
    """Run (or skip, if done or not due) the evaluate stage of iteration k; returns its manifest."""
    return execute_stage("evaluate", run_dir, k, config_hash, upstream)


def latest_policy_step(run: RunDir) -> int:
    ckpts = list_checkpoints(run.policy_root)
    if not ckpts:
        raise FileNotFoundError(f"run {run.root} has no policy checkpoint under {run.policy_root}; train it first")
    return ckpts[-1].step


@task(name="evaluate-checkpoint", task_run_name="step-{step}-{split}")
def evaluate_checkpoint_task(run_dir: str, step: int | None = None, split: str = "validation",
                             seeded: bool | None = None) -> dict:
    """Evaluate θ_step of a run on `split` with the run's eval settings; write and return the metrics.

    `seeded` adds the explorable-space evaluation (θ_step continuing seeds of its historical pool,
    `eval_seeded/*`); None follows the run's `eval.seeded`, as the final training evaluation does.
    """
    run = RunDir(Path(run_dir))
    if not run.config_path.exists():
        raise FileNotFoundError(f"{run.root} is not a run directory (no config.yaml); check the run id and TS_RUNS_DIR")
    step = latest_policy_step(run) if step is None else step
    if not (run.data_dir / f"{split}.parquet").exists():
        have = sorted(p.stem for p in run.data_dir.glob("*.parquet"))
        raise FileNotFoundError(f"run {run.run_id} has no {split!r} split (it has {have})")
    cfg = load_saved_config(run.config_path)
    cfg.eval.split = split  # validated assignment: only validation | test
    s = Session(run, cfg)
    try:
        t = Timer()
        metrics = evaluate_policy(s, step, t, seeded=cfg.eval.seeded if seeded is None else seeded)
    finally:
        s.close()
    metrics.update({f"time/evaluate/{part}": sec for part, sec in t.seconds.items()})
    path = run.write_metrics(step, f"evaluate-{split}", metrics)
    return {"run_id": run.run_id, "step": step, "split": split, "path": run.rel(path), "metrics": metrics}
