"""`ts`: the command line of thinking-seeds.

    ts [--runs-dir D] COMMAND ...     (global options may also follow the command: ts eval X --runs-dir D)
    ts train --preset tiny --run-id demo [--set prefix.ratio_max=0.5 ...] [--no-prefect]
    ts plan --preset tiny [--set ...] [--gpus 8 --gpu-gib 80]   (the memory plan: per process and device)
    ts check RUN_ID
    ts trainer-node --run-id RUN_ID --machine-rank R      (another machine of a run's trainer group)
    ts eval RUN_ID [--step N] [--split validation|test | --data FILE.parquet [--reward SPEC]] [--no-prefect]
    ts data asdiv --out asdiv.parquet                 (a public benchmark as a verl-schema file)
    ts export RUN_ID --out DIR [--step N]
    ts report RUN_ID
    ts compare --methods grpo,thinking_seeds --seeds 0,1,2 [--set k=v] [--sweep k=v1,v2] --id NAME [--no-prefect]
    ts runs
    ts sql "SELECT ..." [--run-id ID]  |  ts sql --query NAME [--run-id ID]  |  ts sql --list
    ts compact RUN_ID
    ts config show --preset NAME [--set ...]  |  ts config keys [FILTER]

One module per command group (train: train/check; evaluate: eval/export; report: report/runs/sql/compact;
compare; config), `output` for everything printed, `errors` for the one error handler: a mistake
the user can fix is one line on stderr and exit code 2 (see errors.py); TS_DEBUG=1 shows the
traceback. Heavy imports (Prefect, torch, matplotlib, DuckDB) happen inside the commands that need
them, so `ts --help`, `ts sql` and `ts config` start fast.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

# thinking_seeds.flows (imported first) turns Prefect's telemetry off before any command imports Prefect
from thinking_seeds.flows.cli import compare, config, data, evaluate, plan, report, train
from thinking_seeds.flows.cli.errors import EXIT_INTERRUPTED, EXIT_USER_ERROR, Group, exit_interrupted, is_user_error

__all__ = ["EXIT_USER_ERROR", "app", "main"]

_is_user_error = is_user_error  # the name tests and older callers use

app = typer.Typer(
    cls=Group,
    help="thinking-seeds: token-level mix-policy RL "
    "(historical checkpoints write the prefix, the current policy continues it).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _main(
    runs_dir: Path | None = typer.Option(
        None,
        "--runs-dir",
        envvar="TS_RUNS_DIR",
        help="Folder holding the run directories (default ./runs).",
        show_default=False,
    ),
) -> None:
    if runs_dir is not None:
        os.environ["TS_RUNS_DIR"] = str(runs_dir)


app.command("train")(train.train)
app.command("plan")(plan.plan)
app.command("eval")(evaluate.eval_)
app.command("report")(report.report)
app.command("export")(evaluate.export)
app.command("compare")(compare.compare)
app.command("runs")(report.runs)
app.command("sql")(report.sql)
app.command("compact")(report.compact)
app.command("check")(train.check)
app.command("trainer-node")(train.trainer_node)
app.add_typer(config.config_app, name="config")
app.add_typer(data.data_app, name="data")


def main() -> None:  # pragma: no cover - the `ts` script and `python -m thinking_seeds.flows.cli`
    try:
        app()
    except SystemExit as e:
        if e.code == EXIT_INTERRUPTED:
            exit_interrupted()  # Ctrl-C: the one line is out; leave now (errors.py)
        raise
