"""Commands on one policy step of a run: `ts eval` (evaluate it on a held-out split, or on the user's
own verl-schema benchmark with --data; what it prints: eval_output.py) and `ts export` (write it as a
Hugging Face model directory)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from thinking_seeds.flows.cli.errors import writing_to
from thinking_seeds.flows.cli.output import OutputFormat, given


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
    ctx: typer.Context,
    run_id: str = typer.Argument(..., help="Run to evaluate."),
    step: int | None = typer.Option(None, "--step", help="Policy step θ_step (default: the latest checkpoint)."),
    split: Split = typer.Option(Split.validation, "--split", help="Held-out split of the run (without --data)."),
    data: Path | None = typer.Option(
        None,
        "--data",
        help="Your own benchmark: a verl-schema Parquet file (data_source, prompt, reward_model, ...); "
        "reports avg@n, pass@k and maj@k per data source.",
    ),
    reward: str | None = typer.Option(
        None,
        "--reward",
        help="With --data: score with package.module:function (as reward.fn) or a backend "
        "(math_verify, reasoning_gym) instead of the run's reward.",
    ),
    samples: int | None = typer.Option(None, "--samples", min=1, help="Samples per prompt (default eval.samples)."),
    prompts: int | None = typer.Option(
        None, "--prompts", min=1, help="With --data: only the first N prompts (the file is read no further)."
    ),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", min=1, help="With --data: the response cap (default rollout.max_new_tokens)."
    ),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format."),
    no_prefect: bool = typer.Option(False, "--no-prefect", help="Evaluate in this process (no Prefect flow)."),
) -> None:
    """Evaluate a policy of a run on a held-out split, or on your own benchmark with --data (Prefect flow)."""
    if data is None and (reward is not None or prompts is not None or max_new_tokens is not None):
        raise typer.BadParameter("--reward, --prompts and --max-new-tokens go with --data FILE.parquet")
    if data is not None and given(ctx, "split"):
        raise typer.BadParameter("--split goes with a run's own held-out data: leave out --data, or leave out --split")
    from thinking_seeds.config.sections_loop import MAX_EVAL_SAMPLES

    if samples is not None and samples > MAX_EVAL_SAMPLES:  # every response is held until scored
        raise typer.BadParameter(f"--samples {samples} is more than {MAX_EVAL_SAMPLES:,} (eval.samples's bound)")
    run = existing_run(run_id)  # before Prefect starts: a wrong run, step, file or damaged weights is one line
    from thinking_seeds.pipeline.policy_steps import policy_step
    from thinking_seeds.store.checkpoints import verify_checkpoint

    step = policy_step(run, step)
    verify_checkpoint(run.policy(step))
    run.check_config()  # before the reward fn it names is imported: a run directory is data until checked
    if data is not None:
        from thinking_seeds.data.sources import load_dataset

        load_dataset(data, limit=prompts)  # a missing or wrongly typed file: one line naming it
    if no_prefect:
        res = _evaluate_here(run, step, split.value, data, reward, samples, prompts, max_new_tokens)
    else:
        from thinking_seeds.flows.cli.prefect_server import start_prefect

        start_prefect()  # the temporary server dies with this process; a user's mistake stays one line
        from thinking_seeds.flows.evaluate import evaluate_flow

        res = evaluate_flow(
            run_id=run_id,
            step=step,
            split=split.value,
            data=None if data is None else str(data),
            reward=reward,
            samples=samples,
            prompts=prompts,
            max_new_tokens=max_new_tokens,
        )
    from thinking_seeds.flows.cli.eval_output import print_result

    print_result(res, fmt)


def _evaluate_here(run, step, split, data, reward, samples, prompts, max_new_tokens) -> dict:
    if data is not None:
        from thinking_seeds.pipeline.data_eval import evaluate_checkpoint_on_data

        return evaluate_checkpoint_on_data(run.root, data, step, reward, samples, prompts, max_new_tokens)
    from thinking_seeds.pipeline.checkpoint_eval import evaluate_checkpoint

    return evaluate_checkpoint(run.root, step, split, samples=samples)


def export(
    run_id: str = typer.Argument(..., help="Run to export from."),
    out: Path = typer.Option(..., "--out", "-o", help="New folder for the Hugging Face model directory."),
    step: int | None = typer.Option(None, "--step", help="Policy step θ_step (default: the latest)."),
) -> None:
    """Write a policy step as a clean Hugging Face model directory (weights, config, tokenizer, model card)."""
    run = existing_run(run_id)
    _check_export_target(out)
    from thinking_seeds.pipeline.export import export_policy

    writing_to(out, "run the same `ts export` again (a failed export leaves nothing behind)")
    typer.echo(export_policy(run, step, out))


def _check_export_target(out: Path) -> None:
    """Refuse, in one line, an --out that is a file or a link, lies under a file, or lies inside a run
    directory (an export into policy/step_N would replace the run's own checkpoint)."""
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.sql import list_runs

    if out.is_symlink():
        raise DataError(f"--out {out} is a link; name a new folder (links are not followed)")
    for p in (out, *out.parents):
        if p.exists() and not p.is_dir():
            raise DataError(f"--out {out}: {p} is a file, not a folder; name a new folder")
    target = out.resolve()
    for root in list_runs():
        if target == root.resolve() or target.is_relative_to(root.resolve()):
            raise DataError(f"--out {out} is inside run directory {root}; name a folder outside the runs")
