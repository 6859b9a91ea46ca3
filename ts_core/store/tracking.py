"""Experiment trackers: every metric of a run (verl names) and its config, to the user's tools.

    logger: [console, tensorboard, mlflow, wandb]      # verl's `trainer.logger` convention

The run directory's Parquet metrics stay the source of truth (SQL, reports, resume); trackers are
copies made as each stage finishes. Nothing leaves the machine unless the user says so:

- tensorboard: event files in `<run>/tensorboard/` (`tensorboard --logdir runs/<id>/tensorboard`).
- mlflow: a local file store `<run>/mlruns/` unless MLFLOW_TRACKING_URI is set; one MLflow run per
  run id (resumed by name), the config flattened into params.
- wandb: offline mode in `<run>/wandb/` unless WANDB_MODE is set (`wandb sync` uploads later);
  the run id is W&B's id, so a resumed run appends to the same W&B run.
- console: nothing extra (the CLI already prints one line per iteration).

Each backend is an optional extra (`pip install thinking-seeds[tensorboard|mlflow|wandb]`); a
missing package is reported at start with the extra to install, before any training.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from thinking_seeds.plugins import check_loggers

__all__ = ["Tracker", "flatten"]


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists become strings (trackers take scalars as params)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
    return out


class Tracker:
    """Fans `log(metrics, step)` out to the configured backends; `close()` flushes them."""

    def __init__(self, loggers: list[str], run_root: Path, run_id: str, config: dict[str, Any]):
        check_loggers(loggers)
        self.loggers = [name for name in loggers if name != "console"]
        self._tb = self._mlflow = self._wandb = None
        root = Path(run_root)
        params = flatten(config)
        if "tensorboard" in self.loggers:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(root / "tensorboard"))
            self._tb.add_text("config", "\n".join(f"    {k}: {v}" for k, v in sorted(params.items())))
        if "mlflow" in self.loggers:
            import mlflow

            uri = os.environ.get("MLFLOW_TRACKING_URI")
            if not uri:
                # A local file store beside the run: MLflow 3 deprecates it for servers and asks for
                # this opt-in, but it is the one backend that needs no database and no network.
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
                uri = (root / "mlruns").resolve().as_uri()
            self._mlflow = mlflow.MlflowClient(tracking_uri=uri)
            exp = self._mlflow.get_experiment_by_name("thinking-seeds")
            exp_id = exp.experiment_id if exp else self._mlflow.create_experiment("thinking-seeds")
            found = self._mlflow.search_runs([exp_id], filter_string=f"tags.mlflow.runName = '{run_id}'")
            if found:
                self._mlflow_run = found[0].info.run_id
            else:
                self._mlflow_run = self._mlflow.create_run(exp_id, run_name=run_id).info.run_id
                for k, v in params.items():  # params are write-once in MLflow: only on a new run
                    self._mlflow.log_param(self._mlflow_run, k, v)
        if "wandb" in self.loggers:
            import wandb

            self._wandb = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "thinking-seeds"),
                id=run_id,
                name=run_id,
                dir=str(root),
                mode=os.environ.get("WANDB_MODE", "offline"),
                config=params,
                resume="allow",
                reinit="create_new",
            )

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Log the finite metrics of one stage at `step` (the iteration, or the policy step for eval)."""
        clean = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
        }
        if not clean:
            return
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, global_step=step)
        if self._mlflow is not None:
            from mlflow.entities import Metric

            # MLflow keys allow '/', '.', '-', '_', ' ' and alphanumerics; '@' (pass@k) and '=' are not.
            ms = [
                Metric(key=k.replace("@", "_at_").replace("=", "_"), value=v, timestamp=0, step=step)
                for k, v in clean.items()
            ]
            self._mlflow.log_batch(self._mlflow_run, metrics=ms)
        if self._wandb is not None:
            self._wandb.log(clean, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._mlflow is not None:
            self._mlflow.set_terminated(self._mlflow_run)
        if self._wandb is not None:
            self._wandb.finish()
        self._tb = self._mlflow = self._wandb = None
