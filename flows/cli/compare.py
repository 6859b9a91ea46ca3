"""`ts compare`: methods over seeds on one budget (resumable), the SFT control, the report."""

from __future__ import annotations

from pathlib import Path

import typer

from thinking_seeds.flows.cli.output import command_line, console

_DEFAULT_METHODS = (
    "grpo,seq_mix,luffy,prefix_context,thinking_seeds"  # thinking_seeds.experiments.compare.DEFAULT_METHODS
)


def compare(
    ctx: typer.Context,
    preset: str = typer.Option("tiny", "--preset", "-p", help="Preset name (data/presets/NAME.yaml) or a YAML path."),
    methods: str = typer.Option(
        _DEFAULT_METHODS,
        "--methods",
        "-m",
        help="Comma-separated methods (algorithm presets); a method may name its own seeds, "
        "e.g. grpo:0-4,seq_mix:0-2 (else --seeds).",
    ),
    seeds: str = typer.Option(
        "0,1,2", "--seeds", help="Comma-separated seeds of every method that names none of its own (grpo:0-4 does)."
    ),
    set_: list[str] = typer.Option(
        [], "--set", "-s", help="Override a config key for every run: section.key=value (repeatable)."
    ),
    sweep: list[str] = typer.Option(
        [], "--sweep", help="Ablation: section.key=v1,v2 (repeatable; the cartesian product is run)."
    ),
    one_at_a_time: bool = typer.Option(
        False,
        "--one-at-a-time",
        help="Vary one --sweep key at a time from the base config instead of the cartesian product.",
    ),
    reference: str | None = typer.Option(
        None,
        "--reference",
        help="Include the unswept runs (same methods and seeds) of comparison ID in the report as the ablation's "
        "base point instead of training them again; budgets must match.",
    ),
    parallel: int = typer.Option(
        2, "--parallel", "-j", min=1, help="Runs trained at once (one process and one torch thread each)."
    ),
    out: Path = typer.Option(
        Path("docs/results"), "--out", "-o", help="The report goes to OUT/ID/report.md (+ PNG, results.parquet)."
    ),
    compare_id: str = typer.Option("compare", "--id", help="Comparison name: run ids are ID-METHOD[-KEY=VAL]-sSEED."),
    no_prefect: bool = typer.Option(False, "--no-prefect", help="Run in this process (no Prefect flow)."),
    no_control: bool = typer.Option(False, "--no-control", help="Skip the equal-compute SFT control."),
    no_final_test: bool = typer.Option(
        False, "--no-final-test", help="Skip the final evaluation of every run on the whole test split."
    ),
    control_seconds: float | None = typer.Option(
        None,
        "--control-seconds",
        min=0.0,
        help="SFT control budget in seconds (default: the mean RL run's training time).",
    ),
    control_corpus: int | None = typer.Option(
        None, "--control-corpus", min=1, help="Worked solutions generated for the SFT control (default 50000)."
    ),
    report_only: bool = typer.Option(
        False,
        "--report-only",
        help="Train nothing: write the report of the runs that "
        "exist now (a comparison still running or stopped half-way).",
    ),
    archive: bool = typer.Option(
        False,
        "--archive",
        help="Copy the small result files of every finished run into "
        "OUT/ID/runs/ (commit it): the same command in a later session counts them as done "
        "and reports them without training them again.",
    ),
) -> None:
    """Compare methods over seeds on one budget (resumable), add the SFT control, write the report."""
    from thinking_seeds.config import ConfigError
    from thinking_seeds.experiments.compare import prepare, write_report
    from thinking_seeds.experiments.spec import ComparisonSpec
    from thinking_seeds.store.run_dir import runs_root

    try:
        spec = ComparisonSpec.of(
            compare_id=compare_id,
            preset=preset,
            methods=methods,
            seeds=seeds,
            overrides=set_,
            sweep=sweep,
            one_at_a_time=one_at_a_time,
            reference=reference,
            parallel=parallel,
            out_dir=out,
            control=not no_control,
            control_seconds=control_seconds,
            control_corpus_size=control_corpus,
            final_test=not no_final_test,
            archive=archive,
            command=command_line(ctx, skip=("report_only",)),
        )  # the command that (re)runs it
    except ConfigError as e:  # a bad argument: click's usage error (one line, exit 2, the --help hint)
        raise typer.BadParameter(str(e)) from None
    specs = prepare(spec, runs_root())  # fail fast, before any run: plan, budgets, archived runs, --reference
    con = console()
    if report_only:  # with --archive, also archive what has finished (another process may be training)
        if spec.archive:
            from thinking_seeds.experiments.compare import archive_finished

            con.print(f"archived: {', '.join(archive_finished(spec, specs, runs_root())) or 'nothing new'}")
        con.print(f"[green]report (runs so far):[/] {write_report(spec, runs_root())}")
        return
    con.print(
        f"comparison [bold]{compare_id}[/]: {len(specs)} runs ({spec.plan_text()}"
        + (f" x sweep {', '.join(sweep)}" + (" one at a time" if one_at_a_time else "") if sweep else "")
        + (f", base point from {reference}" if reference else "")
        + f"), {parallel} at once"
    )
    if no_prefect:  # failed runs raise CompareError: the one error handler prints it (exit 2)
        from rich.console import Console

        from thinking_seeds.experiments.compare import run_comparison

        path = run_comparison(spec, console=Console(stderr=True))
    else:
        from thinking_seeds.flows.cli.prefect_server import start_prefect

        start_prefect()
        from thinking_seeds.flows.compare import compare_flow

        path = compare_flow(spec)
    con.print(f"[green]report:[/] {path}")
