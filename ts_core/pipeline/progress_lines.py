"""The one-line views of a run's progress, shared by the plain loop, the Prefect flow and the CLI:
an iteration's summary, an evaluation, and what the first stage does and took."""

from __future__ import annotations

from typing import Any

SUMMARY_KEYS = ("reward/mean", "actor/entropy/all", "actor/pg_clipfrac/all", "eval/accuracy")


def summary(metrics: dict[str, float]) -> str:
    """The one-line view of an iteration on the terminal: reward, entropy, clip fraction, accuracy."""
    return ", ".join(f"{n} {metrics[n]:.4f}" for n in SUMMARY_KEYS if n in metrics)


def evaluation_line(step: int, metrics: dict[str, float]) -> str:
    """The evaluation of θ_step, labelled by the policy step it evaluates (θ_4: after iteration 3)."""
    return f"θ_{step}: eval/accuracy {metrics['eval/accuracy']:.4f}"


def prepare_start_line(cfg: Any) -> str:
    """What the first stage of a new run is doing (it can take minutes with a large base model)."""
    d = cfg.data
    data = (
        f"your files ({d.train_path}, {d.val_path})"
        if d.source == "parquet"
        else f"{d.train_size} train / {d.val_size} validation / {d.test_size} test prompts of {d.source}"
    )
    return f"prepare: config.yaml, the data splits ({data}) and θ_0, a verified copy of {cfg.model.path} ..."


def prepare_done_line(seconds: dict[str, float], cfg: Any) -> str:
    """The first stage's time by part, and what comes next (θ_0's evaluation, with its own progress lines)."""
    names = {"data": "data", "model_load": "θ_0"}
    parts = ", ".join(f"{names.get(k, k)} {v:.1f} s" for k, v in seconds.items())
    e = cfg.eval
    return (
        f"prepare done in {sum(seconds.values()):.1f} s ({parts}); next: θ_0 on {e.prompts} {e.split} prompts "
        f"x {e.samples} samples"
    )
