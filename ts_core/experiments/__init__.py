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

What the report's claims rest on (claims.py and compare_sections.py use them): power.py (Holm, the
paired t-test, power) and planning.py (`--plan`); protocol.py (the pre-registered protocol and its hash);
selection.py (validation selection); matched.py (matched pass@1 at every pair within one SE);
hard_subset.py; claims_tables.py (the tables around the claims); equal_reading.py (every row also at
equal iterations) and equal_iterations.py (a compute-matched method's checkpoint at the other arm's
count, tested in the run's own job); base_noise.py (θ_0's own sampling sd); recorded_defaults.py (a
default that changed after a comparison recorded a run: the old value kept for that run, `RunSpec.kept`);
seed_decides.py (does-the-seed-decide statistics, kept in a seeded run's archive as rollouts are not).
"""
