"""The evaluation flow: held-out accuracy and pass@k of one policy checkpoint of a run.

Deployed nightly (prefect.yaml): evaluates the latest checkpoint of a run, which may still be
training (checkpoints appear atomically, so a half-written one is never picked). Metrics go to
`runs/<id>/metrics/iteration=<step>/evaluate-<split>.parquet` (same long format as the training
metrics; stage column `evaluate-<split>`), and a table artifact shows them in the UI.

    python -m thinking_seeds.flows.evaluate --run-id demo [--step 4] [--split test]
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact

from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.tasks.artifacts import artifact_key
from thinking_seeds.tasks.checkpoint_eval import evaluate_checkpoint_task


@flow(name="evaluate", flow_run_name="evaluate-{run_id}-{split}")
def evaluate_flow(run_id: str, step: int | None = None, split: str = "validation", seeded: bool | None = None) -> dict:
    """Evaluate θ_step of run `run_id` (default: the latest checkpoint) on `split` (validation | test).

    `seeded` also measures the explorable solution space (continuations of historical seeds);
    None follows the run's `eval.seeded`. Returns {"run_id", "step", "split", "path" (metrics
    file, relative to the run dir), "metrics"}.
    """
    run = RunDir.for_run(run_id)
    out = evaluate_checkpoint_task(str(run.root), step, split, seeded)
    m = out["metrics"]
    get_run_logger().info(
        "run %s θ_%d on %s: accuracy %.3f", run_id, out["step"], split, m.get("eval/accuracy", float("nan"))
    )
    create_table_artifact(
        [{"name": k, "value": round(float(v), 6)} for k, v in sorted(m.items()) if not k.startswith("time/")],
        key=artifact_key(run_id, "evaluation", split),
        description=f"run {run_id}: θ_{out['step']} on the {split} split",
    )
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Evaluate a run's policy checkpoint (default: the latest).")
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--split", default="validation", choices=["validation", "test"])
    a = ap.parse_args()
    print(evaluate_flow(run_id=a.run_id, step=a.step, split=a.split))
