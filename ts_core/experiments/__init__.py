"""Experiments over many runs: the comparison of methods (`ts compare`), its SFT control and report.

Modules, each importing only those listed before it (no cycles; tests/unit/test_layers.py checks):

    comparison_args  the arguments (methods, seeds, --set, --sweep) parsed and checked, no config loaded
    run_spec         one run of a comparison: RunSpec, plan, the shared budget and training time
    spec             the whole request: ComparisonSpec (what `ts compare` asks for)
    jobs             subprocesses, `parallel` at once, with progress and failure reports
    members          the runs on disk: compare.json markers, completion, training time
    archive          a comparison's committed archive: finished runs' small files, restored in a later session
    sft_budget       the SFT control's training: warm-up steps for a wall-time budget, cut where RL runs evaluate
    sft_control      the equal-compute SFT control: its config, process and jobs
    compare_data     the report's numbers (DuckDB over the runs)
    claims           the paper's claims as paired differences (the report's first tables)
    compare_plots    the report's plots
    compare_sections the report's tables after its introduction (final test, paired differences, ...)
    compare_report   report.md and results.parquet
    compare_archive  which of a comparison's runs the archive restores before it runs and takes as they finish
    compare          the orchestration: prepare, run_all, controls, final tests, archive, report
"""
