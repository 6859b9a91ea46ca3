"""The evaluation flow: held-out accuracy and pass@k of one policy checkpoint of a run, or avg@n,
pass@k and maj@k per data source on the user's own verl-schema file (`data`).

Deployed nightly (prefect.yaml): evaluates the latest checkpoint of a run, which may still be
training (checkpoints appear atomically, so a half-written one is never picked). Metrics go to
`runs/<id>/metrics/iteration=<step>/evaluate-<split>.parquet` (same long format as the training
metrics; stage column `evaluate-<split>`; with `data`: `evaluate-data-<file stem>`, and the whole
result to `evals/evaluate-data-<file stem>/step_<step>.json`), and a table artifact shows them in the UI.

    ts eval demo [--step 4] [--split test] [--data my.parquet]
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact

from thinking_seeds.flows.run_errors import user_errors_in_one_line
from thinking_seeds.pipeline.policy_steps import policy_step
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.tasks.artifacts import artifact_key
from thinking_seeds.tasks.checkpoint_eval import evaluate_checkpoint_task, evaluate_data_task


def _flow_run_name() -> str:
    """evaluate-<run>-<split>, or evaluate-<run>-<file stem> for a user's file."""
    from prefect.runtime import flow_run

    p = flow_run.parameters
    return f"evaluate-{p.get('run_id')}-{Path(p['data']).stem if p.get('data') else p.get('split', 'validation')}"


@flow(name="evaluate", flow_run_name=_flow_run_name, log_prints=True)
@user_errors_in_one_line
def evaluate_flow(
    run_id: str,
    step: int | None = None,
    split: str = "validation",
    seeded: bool | None = None,
    data: str | None = None,
    reward: str | None = None,
    samples: int | None = None,
    prompts: int | None = None,
    max_new_tokens: int | None = None,
) -> dict:
    """Evaluate θ_step of run `run_id` (default: the latest checkpoint) on `split` (validation | test),
    or on the verl-schema file `data` (scored by the run's reward, or `reward`).

    `seeded` also measures the explorable solution space (continuations of historical seeds);
    None follows the run's `eval.seeded`. Returns {"run_id", "step", "split", "path" (metrics
    file, relative to the run dir), "metrics"}; with `data`, the per-source result of
    `thinking_seeds.pipeline.data_eval.evaluate_checkpoint_on_data`.
    """
    run = RunDir.for_run(run_id)
    if not run.config_path.exists():
        raise FileNotFoundError(f"{run.root} is not a run directory (no config.yaml); check the run id and TS_RUNS_DIR")
    step = policy_step(run, step)  # the task run is named after the step it evaluates
    log = get_run_logger()
    if data is not None:
        name = Path(data).stem
        out = evaluate_data_task(str(run.root), data, name, step, reward, samples, prompts, max_new_tokens)
        m = out["metrics"]
        log.info("run %s θ_%d on %s: pass@1 %.3f over %d prompts", run_id, step, data, m["pass@1"], m["prompts"])
        rows = [{"source": src, **_numbers(g)} for src, g in {**out["by_source"], "all": m}.items()]
        create_table_artifact(
            rows, key=artifact_key(run_id, "evaluation", name), description=f"run {run_id}: θ_{step} on {data}"
        )
        return out
    out = evaluate_checkpoint_task(str(run.root), step, split, seeded, samples)
    m = out["metrics"]
    log.info("run %s θ_%d on %s: accuracy %.3f", run_id, out["step"], split, m.get("eval/accuracy", float("nan")))
    create_table_artifact(
        [{"name": k, "value": round(float(v), 6)} for k, v in sorted(m.items()) if not k.startswith("time/")],
        key=artifact_key(run_id, "evaluation", split),
        description=f"run {run_id}: θ_{out['step']} on the {split} split",
    )
    return out


def _numbers(group: dict) -> dict:
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in group.items() if k != "status"}
