"""Commands on one policy step of a run: `ts eval` (evaluate it on a held-out split) and
`ts export` (write it as a Hugging Face model directory)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from thinking_seeds.flows.cli.output import OutputFormat, emit


class Split(StrEnum):
    validation = "validation"
    test = "test"


def existing_run(run_id: str) -> Any:
    """The RunDir of a run that exists (has its config.yaml); else a DataError naming where it looked."""
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run(run_id)
    if not run.config_path.is_file():
        raise DataError(f"no run {run_id!r} under {run.root.parent} (no config.yaml); see `ts runs`, or set --runs-dir")
    return run


def eval_(
    run_id: str = typer.Argument(..., help="Run to evaluate."),
    step: int | None = typer.Option(None, "--step", help="Policy step θ_step (default: the latest)."),
    split: Split = typer.Option(Split.validation, "--split", help="Held-out split."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format."),
) -> None:
    """Evaluate a policy of a run on a held-out split (Prefect flow)."""
    _check_eval_target(run_id, step)  # before Prefect starts: a wrong run or step is one line
    from thinking_seeds.flows.cli.prefect_server import start_prefect

    start_prefect()  # the temporary server dies with this process; a user's mistake stays one line
    from thinking_seeds.flows.evaluate import evaluate_flow

    res = evaluate_flow(run_id=run_id, step=step, split=split.value)
    rows = sorted((k, v) for k, v in (res or {}).items())
    emit(
        ["metric", "value"], rows, fmt, title=f"{run_id}: {split.value}" + (f" step {step}" if step is not None else "")
    )


def _check_eval_target(run_id: str, step: int | None) -> None:
    """Refuse a run that does not exist or a policy step it does not have, listing the steps it has."""
    from thinking_seeds.store.parquet_io import DataError

    run = existing_run(run_id)
    steps = sorted(int(p.name[5:]) for p in run.policy_root.glob("step_*") if p.name[5:].isdigit())
    if step is not None and step not in steps:
        raise DataError(
            f"run {run_id!r} has no policy step {step} (it has {ranges(steps) or 'none'}); "
            f"pass --step with one of them, or leave --step out for the latest"
        )
    from thinking_seeds.store.checkpoints import list_checkpoints, verify_checkpoint

    complete = list_checkpoints(run.policy_root)
    if step is not None or complete:  # damaged weights: one line here, before Prefect starts
        verify_checkpoint(run.policy(complete[-1].step if step is None else step))


def ranges(steps: list[int]) -> str:
    """[0,1,2,5] -> '0-2, 5'."""
    out: list[str] = []
    for x in steps:
        if out and int(out[-1].split("-")[-1]) == x - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{x}"
        else:
            out.append(str(x))
    return ", ".join(out)


def export(
    run_id: str = typer.Argument(..., help="Run to export from."),
    out: Path = typer.Option(..., "--out", "-o", help="New folder for the Hugging Face model directory."),
    step: int | None = typer.Option(None, "--step", help="Policy step θ_step (default: the latest)."),
) -> None:
    """Write a policy step as a clean Hugging Face model directory (weights, config, tokenizer, model card)."""
    run = existing_run(run_id)
    from thinking_seeds.pipeline.export import export_policy

    typer.echo(export_policy(run, step, out))
