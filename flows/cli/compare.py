"""`ts compare`: methods over seeds on one budget (resumable), the SFT control, the report."""

from __future__ import annotations

from pathlib import Path

import typer

from thinking_seeds.flows.cli.output import command_line, console, given

_DEFAULT_METHODS = "grpo,seq_mix,luffy,prefix_context,thinking_seeds"  # thinking_seeds.experiments.spec.DEFAULT_METHODS


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
    primary: str | None = typer.Option(
        None,
        "--primary",
        help="The primary endpoint's pair A-B: test pass@1, A − B at equal seed (default "
        "thinking_seeds_adaptive-grpo when compared, else thinking_seeds-grpo).",
    ),
    plan: bool = typer.Option(
        False,
        "--plan",
        help="Train nothing: print the minimum detectable effect of the primary endpoint (80% power, two-sided "
        "alpha 0.05, paired t) for these seeds, from --plan-from or --plan-sd, and exit.",
    ),
    plan_from: Path | None = typer.Option(
        None, "--plan-from", help="A pilot's or prior comparison's report folder (its results.parquet) for --plan."
    ),
    plan_sd: float | None = typer.Option(
        None, "--plan-sd", min=0.0, help="The per-seed sd of the primary paired difference, for --plan."
    ),
    reading: str = typer.Option(
        "compute_matched",
        "--reading",
        help="When methods train different iterations, the claims table's registered reading (its Holm family "
        "and primary endpoint): compute_matched (each arm's final policy) or equal_iterations (the longer arm's "
        "checkpoint at the shorter arm's count); the other reading is shown beside it.",
    ),
    amend_protocol: bool = typer.Option(
        False,
        "--amend-protocol",
        help="Accept a protocol that differs from the registered OUT/ID/protocol.json and record the amendment.",
    ),
    select: str | None = typer.Option(
        None,
        "--select",
        help="Choose a setting on validation for every method alike: KEY=V1,V2,... (e.g. lr=1e-4,3e-4,1e-3); "
        "each method trains the grid on --select-seeds and gets its best value by validation pass@1.",
    ),
    select_seeds: str = typer.Option("0-2", "--select-seeds", help="Seeds of the selection runs (0-2 or 0,1,2)."),
    select_on: str = typer.Option(
        "validation", "--select-on", help="The split the selection reads: validation (the test split never)."
    ),
    select_methods: str | None = typer.Option(
        None,
        "--select-methods",
        help="Comma-separated methods the selection tunes (default: every compared method); the others keep "
        "the preset's value.",
    ),
    select_follow: str | None = typer.Option(
        None,
        "--select-follow",
        help="METHOD=TUNED[,...]: an untuned method takes the value chosen for TUNED (e.g. seq_mix=thinking_seeds).",
    ),
    control_seeds: str | None = typer.Option(
        None, "--control-seeds", help="Seeds of the SFT control (200-202 or 200,201; default: every RL seed)."
    ),
    select_set: list[str] = typer.Option(
        [],
        "--select-set",
        help="eval.KEY=VALUE for the selection runs only (repeatable), e.g. eval.every=1000: the choice "
        "evaluates each final policy itself, so their in-training evaluations can be skipped.",
    ),
    method_set: list[str] = typer.Option(
        [],
        "--method-set",
        help="METHOD:KEY=VALUE, a setting of one method only (repeatable), e.g. "
        "thinking_seeds:prefix.ratio_of=budget, or grpo:iterations=185 to match compute (the one budget key "
        "a method may set for itself).",
    ),
    yes: bool = typer.Option(
        False,
        "--yes",
        "-y",
        help="Start the comparison the defaults describe (without --methods or --seeds, ts compare only prints "
        "its plan: runs, iterations, estimated time).",
    ),
) -> None:
    """Compare methods over seeds on one budget (resumable), add the SFT control, write the report.
    Without --methods or --seeds it prints what it would run and how long that would take, and starts
    nothing: add --yes to start it."""
    from thinking_seeds.config import ConfigError
    from thinking_seeds.experiments.compare import prepare, write_report
    from thinking_seeds.experiments.spec import ComparisonSpec
    from thinking_seeds.store.run_dir import runs_root

    _check_goes_with(ctx, plan=plan, control=not no_control, select=bool(select))
    if select_on != "validation":
        raise typer.BadParameter(f"--select-on {select_on}: selection reads the validation split only (never test)")
    try:
        _check_method_set_vs_select(method_set, select)
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
            primary=primary,
            reading=reading,
            amend_protocol=amend_protocol,
            select=[select] if select else None,
            select_seeds=select_seeds,
            select_overrides=select_set,
            select_methods=select_methods,
            select_follow=select_follow,
            control_seeds=control_seeds,
            method_overrides=method_set,
            command=command_line(ctx, skip=("report_only", "amend_protocol", "plan", "plan_from", "plan_sd", "yes")),
        )  # the command that (re)runs it
        if plan:
            _print_plan(spec, plan_from, plan_sd)
            return
    except ConfigError as e:  # a bad argument: click's usage error (one line, exit 2, the --help hint)
        raise typer.BadParameter(str(e)) from None
    if select:
        from thinking_seeds.experiments.compare import run_selection

        spec, _ = run_selection(spec, runs_root(), train=False) if report_only else (spec, None)
    specs = prepare(spec, runs_root())  # fail fast, before any run: plan, budgets, archived runs, --reference
    con = console()
    if report_only:  # with --archive, also archive what has finished (another process may be training)
        if spec.archive:
            from thinking_seeds.experiments.compare_archive import archive_finished

            con.print(f"archived: {', '.join(archive_finished(spec, specs, runs_root())) or 'nothing new'}")
        con.print(f"[green]report (runs so far):[/] {write_report(spec, runs_root())}")
        return
    con.print(
        f"comparison [bold]{compare_id}[/]: {len(specs)} runs ({spec.plan_text()}"
        + (f" x sweep {', '.join(sweep)}" + (" one at a time" if one_at_a_time else "") if sweep else "")
        + (f", base point from {reference}" if reference else "")
        + f"), {parallel} at once"
    )
    from thinking_seeds.experiments.compare_estimate import estimate

    con.print(estimate(specs, runs_root(), parallel).text(), markup=False, highlight=False)
    if not (yes or given(ctx, "methods") or given(ctx, "seeds")):  # the defaults: hours of training, unasked
        con.print(
            "nothing started: add --yes to run this comparison, or choose with --methods and --seeds",
            markup=False,
            highlight=False,
        )
        return
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


def _check_goes_with(ctx: typer.Context, plan: bool, control: bool, select: bool) -> None:
    """An option given without the one it belongs to would be ignored, and a whole comparison trained
    instead of what was asked: refused. Given = typed (not its default), whatever its value."""
    groups = (
        (plan, "--plan", "add --plan", ("plan_from", "plan_sd")),
        (control, "the SFT control", "leave out --no-control", ("control_seconds", "control_corpus", "control_seeds")),
        (
            select,
            "--select",
            "add --select KEY=V1,V2",
            ("select_set", "select_seeds", "select_methods", "select_follow", "select_on"),
        ),
    )
    for on, parent, fix, names in groups:
        typed = [p for p in ctx.command.params if p.name in names and given(ctx, p.name)]
        if typed and not on:
            option = next(o for o in typed[0].opts if o.startswith("--"))
            raise typer.BadParameter(f"{option} goes with {parent}: {fix}, or leave out {option}")


def _check_method_set_vs_select(method_set: list[str], select: str | None) -> None:
    """--method-set of the key --select chooses would be overwritten by the choice: refused."""
    from thinking_seeds.config import ConfigError
    from thinking_seeds.experiments.comparison_args import parse_method_overrides, resolve_key

    if not select:
        return
    key = resolve_key(select.split("=", 1)[0])
    for method, settings in parse_method_overrides(method_set).items():
        if any(resolve_key(o.split("=", 1)[0]) == key for o in settings):
            raise ConfigError(f"--method-set {method}:{key}=... and --select {key}=...: the selection sets {key}")


def _print_plan(spec, plan_from: Path | None, plan_sd: float | None) -> None:
    """--plan: the primary endpoint's minimum detectable effect for the seeds both its methods run."""
    from thinking_seeds.config import ConfigError
    from thinking_seeds.experiments.comparison_args import method_seeds
    from thinking_seeds.experiments.planning import pilot_sd, plan_text

    if (plan_from is None) == (plan_sd is None):
        raise ConfigError("--plan needs the per-seed sd: give --plan-from docs/results/<id> or --plan-sd 0.029")
    if spec.primary_pair is None:
        raise ConfigError("--plan: no primary pair among these methods; name one with --primary A-B")
    a, b = spec.primary_pair
    own = method_seeds(spec.methods)
    n = len(set(own[a] or spec.seeds) & set(own[b] or spec.seeds))
    sd, how = pilot_sd(plan_from, a, b) if plan_from is not None else (plan_sd, "given with --plan-sd")
    typer.echo(plan_text(sd, how, a, b, n))
