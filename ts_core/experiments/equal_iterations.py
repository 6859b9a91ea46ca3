"""A compute-matched method at equal iterations too: its earlier checkpoint on the whole test split.

    python -m thinking_seeds.experiments.equal_iterations --id game24-main --method grpo --step 150 \\
        --against thinking_seeds,thinking_seeds_adaptive

Why: matching compute by iterations (`ts compare --method-set grpo:iterations=185`) gives GRPO more
updates than the methods it is compared with. Nothing in an update depends on the run's total
iterations (no decaying lr schedule; θ_k is the same whether a run stops at 150 or 185), so θ_150 of
a 185-iteration GRPO run is what a 150-iteration run reaches. Its checkpoint (checkpoint.every)
is evaluated like a final test: every test prompt, eval.test_samples samples, stage
`final-test-equal-iterations`, in the same run directory. The table then pairs each `--against`
method's final test with it by seed: the contrast at equal iterations, beside the report's
compute-matched one.

It is not part of the report's Holm family (the protocol names it as an extra analysis). Nothing is
trained; evaluations whose metrics file exists are not repeated (resumable).

`ts compare` does this itself: a method given more iterations runs the test in its own job, right after
its final test (`pipeline.loop --equal-iterations STEP`), and the report holds the table. This command
is for runs trained before that, or without it.

A comparison outlives the session that runs it, and its run folders (with the checkpoints) do not:
`--finished-only` evaluates the runs that have finished so far (final test written) and leaves the
rest for a later call, and `--archive` copies each evaluated run into the comparison's archive
(`docs/results/<id>/runs/`, archive.py) again, so the result is committed with it. The table reads an
archived run's metrics as well as a live run's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError, load_saved_config
from thinking_seeds.experiments.archive import ARCHIVED_METRICS, archive_run
from thinking_seeds.experiments.claims import _fmt_ci, _fmt_p, _seeds, _table, mean_ci, paired
from thinking_seeds.experiments.compare_data import largest_k
from thinking_seeds.experiments.equal_reading import equal_pair
from thinking_seeds.experiments.jobs import CompareError, Job, checkpoint_eval_cmd, raise_on_failures, run_jobs
from thinking_seeds.experiments.members import archive_record, compare_members
from thinking_seeds.experiments.power import paired_t_p
from thinking_seeds.pipeline.checkpoint_eval import EQUAL_ITERATIONS_STAGE, FINAL_TEST_STAGE
from thinking_seeds.store.run_dir import RunDir, runs_root

__all__ = [
    "archive_evaluated",
    "equal_iterations_done",
    "equal_iterations_jobs",
    "equal_iterations_lines",
    "equal_iterations_plan",
    "equal_iterations_table",
    "main",
]

METRIC = "eval/accuracy"


def equal_iterations_plan(iterations: dict[str, int]) -> tuple[str, int, list[str]] | None:
    """From each method's iterations: (the method given the most, the others' iteration count, the
    methods that train exactly that many), or None when every method trains the same number."""
    if len(set(iterations.values())) < 2:
        return None
    longest = max(iterations, key=lambda k: iterations[k])
    step = statistics.mode(n for k, n in iterations.items() if k != longest)
    return longest, step, [k for k, n in iterations.items() if k != longest and n == step]


def _runs(compare_id: str, runs_dir: Path, method: str) -> dict[int, RunDir]:
    """{seed: run} of one method of a comparison (its run markers)."""
    return {
        int(m["seed"]): RunDir.for_run(m["run_id"], runs_dir)
        for m in compare_members(compare_id, runs_dir)
        if m.get("method") == method and not m.get("sweep")
    }


def _finished(run: RunDir) -> bool:
    """Trained and final-tested (or restored from the archive, which holds only finished runs)."""
    if archive_record(run.root) is not None:
        return True
    if not run.config_path.is_file():
        return False
    return run.metrics(load_saved_config(run.config_path).iterations, FINAL_TEST_STAGE).is_file()


def equal_iterations_jobs(
    compare_id: str, runs_dir: Path, method: str, step: int, finished_only: bool = False
) -> list[Job]:
    """One checkpoint_eval per run of `method`: θ_step on the whole test split, as the final test.
    `finished_only`: skip the runs that have not finished yet (a comparison still running)."""
    runs = _runs(compare_id, runs_dir, method)
    if not runs:
        raise ConfigError(f"comparison {compare_id!r} has no {method} run under {runs_dir}; check --id and --method")
    jobs = []
    for _, run in sorted(runs.items()):
        if finished_only and not _finished(run):
            continue
        if not run.config_path.is_file():
            raise ConfigError(f"{run.run_id} has not started yet; wait for it, or pass --finished-only")
        cfg = load_saved_config(run.config_path)
        if not 0 < step < cfg.iterations:
            raise ConfigError(f"--step {step}: {run.run_id} trains {cfg.iterations} iterations; give 0 < step < it")
        done = _metric(run, step, EQUAL_ITERATIONS_STAGE) is not None
        if not done and not (run.policy_root / f"step_{step:06d}").is_dir():
            raise ConfigError(
                f"{run.run_id} has no checkpoint of step {step} (checkpoint.every={cfg.checkpoint.every}); "
                "choose a step it wrote"
            )
        cmd = checkpoint_eval_cmd(run.root, step, "test", EQUAL_ITERATIONS_STAGE, cfg.eval.test_samples)
        jobs.append(Job(f"{run.run_id} θ_{step}", cmd, run.root / "equal_iterations.log", done=done, run_root=run.root))
    return jobs


def _metric(run: RunDir, step: int, stage: str) -> float | None:
    """METRIC of (step, stage): from the live run's metrics file, or from the one table of an archived run."""
    import pyarrow.parquet as pq

    f = run.metrics(step, stage)
    if f.exists():
        rows = pq.read_table(f).to_pylist()
    elif (run.root / ARCHIVED_METRICS).is_file():
        table = pq.read_table(run.root / ARCHIVED_METRICS).to_pylist()
        rows = [r for r in table if r["iteration"] == step and r["stage"] == stage]
    else:
        return None
    values = {r["name"]: r["value"] for r in rows}
    return float(values[METRIC]) if METRIC in values else None


def equal_iterations_done(run_root: Path, step: int) -> bool:
    """Whether θ_step of the run at `run_root` has its equal-iterations test (live or archived)."""
    return _metric(RunDir(Path(run_root)), step, EQUAL_ITERATIONS_STAGE) is not None


def archive_evaluated(jobs: Sequence[Job], archive_dir: Path) -> list[str]:
    """Copy every run of `jobs` whose evaluation exists into `archive_dir` again (archive.archive_run:
    a run unchanged since its last copy is not rewritten); returns the run ids written."""
    written = []
    for job in jobs:
        run = RunDir(job.run_root)
        if archive_record(run.root) is not None:
            continue  # a restored copy: the archive already holds what it has
        cfg = load_saved_config(run.config_path)
        tested = run.metrics(cfg.iterations, FINAL_TEST_STAGE).is_file()
        if archive_run(run.root, archive_dir, cfg.config_hash(), tested):
            written.append(run.run_id)
    return written


def equal_iterations_table(
    compare_id: str, runs_dir: Path, method: str, step: int, against: Sequence[str]
) -> list[str]:
    """Markdown: each `against` method's final test pass@1 minus `method` at θ_step, paired by seed."""
    base = {s: _metric(r, step, EQUAL_ITERATIONS_STAGE) for s, r in _runs(compare_id, runs_dir, method).items()}
    rows = []
    for other in against:
        finals = {}
        for s, r in _runs(compare_id, runs_dir, other).items():
            if not r.config_path.is_file():
                continue  # planned, not started yet
            cfg = load_saved_config(r.config_path)
            finals[s] = _metric(r, cfg.iterations, FINAL_TEST_STAGE)
        diffs = [(s, finals[s] - base[s]) for s in sorted(finals) if finals[s] is not None and base.get(s) is not None]
        ci = mean_ci([d for _, d in diffs])
        p = paired_t_p([d for _, d in diffs])
        rows.append([f"{other} − {method}@{step}", str(len(diffs)), _fmt_ci(ci), f"{p:.3f}", _seeds(diffs)])
    head = [
        f"### Test pass@1 against {method} at equal iterations "
        f"(θ_{step} of its runs; extra analysis, not Holm-adjusted)",
        "",
    ]
    return head + _table(["difference", "seeds", "mean [95% CI]", "p (paired t)", "per seed"], rows)


# the endpoints read both ways: (metric, label); a metric no run has is left out
ENDPOINTS = (
    ("test/accuracy", "test pass@1"),
    ("test/pass@{k}", "test pass@{k}"),
    ("hard/ever_solved", "hard prompts solved at least once (test)"),
    ("test/distinct_patterns", "distinct correct patterns per test prompt"),
    ("eval/accuracy", "validation pass@1"),
    ("eval/pass@{vk}", "validation pass@{vk}"),
    ("eval/distinct_patterns", "distinct correct patterns per validation prompt"),
    ("actor/effective_entropy/all", "effective entropy (all tokens, last iterations)"),
    ("actor/pg_clipfrac_adv/all", "|A|-weighted clipped share (all tokens, last iterations)"),
)


def _reading(diffs: list[tuple[int, float]]) -> str:
    """mean [95% t-interval] (paired p, n) of per-seed differences."""
    xs = [d for _, d in diffs]
    return f"{_fmt_ci(mean_ci(xs))} (p {_fmt_p(paired_t_p(xs))}, n {len(xs)})" if xs else "— (not evaluated)"


def equal_iterations_lines(
    data: dict[str, Any], variants: dict[str, list[str]], longer: str, others: list[str]
) -> list[str]:
    """Markdown: every endpoint of each of `others` against `longer`, read at the runs' ends (compute
    matched) and at equal iterations, mean [95% t-interval] and paired p over seeds; empty when
    `longer` has no θ_step value at all."""
    k, vk = largest_k(data["per_run"], "test/pass@"), largest_k(data["per_run"], "eval/pass@")
    rows, step = [], None
    for other in others:
        for name, label in ENDPOINTS:
            if ("{k}" in name and k is None) or ("{vk}" in name and vk is None):
                continue
            name, label = name.format(k=k, vk=vk), label.format(k=k, vk=vk)
            ends = paired(data, variants, other, longer, name)
            eq = equal_pair(data, variants, other, longer, name)
            if not ends or eq is None:
                continue
            step = eq.step
            rows.append([f"{other} − {longer}", label, _reading(ends), _reading(eq.diffs)])
    if step is None or all(r[3].startswith("—") for r in rows):
        return []
    head = [
        f"### Every endpoint at equal iterations: {longer} at θ_{step} (extra reading, not Holm-adjusted)",
        "",
        f"{longer} trains more iterations than {', '.join(others)} (compute matched by iterations), so a difference "
        f"at the runs' ends mixes the method with {longer}'s extra updates. The second reading pairs each "
        f"run's end with {longer}'s θ_{step} of the same seed: its test on the whole test split (the "
        "equal-iterations evaluation), its in-training evaluation at that step, and its per-iteration metrics "
        "over the iterations before it. Mean [95% t-interval] over seeds, the paired t-test's p.",
        "",
    ]
    return head + _table(
        ["difference", "endpoint", "at the runs' ends (compute matched)", f"at equal iterations (θ_{step})"], rows
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--id", required=True, help="The comparison id (run ids ID-METHOD-sSEED).")
    ap.add_argument("--method", required=True, help="The method given more iterations (e.g. grpo).")
    ap.add_argument("--step", type=int, required=True, help="The equal iteration count (e.g. 150).")
    ap.add_argument("--against", required=True, help="Comma-separated methods whose final tests are paired with it.")
    ap.add_argument("--runs-dir", type=Path, default=None, help="Runs folder (default: TS_RUNS_DIR or ./runs).")
    ap.add_argument("--parallel", type=int, default=2, help="Evaluations at once.")
    ap.add_argument("--out", type=Path, default=None, help="Also write the table to this markdown file.")
    ap.add_argument(
        "--finished-only", action="store_true", help="Evaluate only the runs that have finished so far (final test)."
    )
    ap.add_argument(
        "--archive",
        action="store_true",
        help="Copy each evaluated run into the comparison's archive again (RESULTS/ID/runs), so the result is kept.",
    )
    ap.add_argument("--results", type=Path, default=Path("docs/results"), help="The comparisons' report folder.")
    args = ap.parse_args(argv)
    runs_dir = (args.runs_dir or runs_root()).resolve()
    try:
        jobs = equal_iterations_jobs(args.id, runs_dir, args.method, args.step, args.finished_only)
        raise_on_failures(run_jobs(jobs, runs_dir, args.parallel, title="equal-iterations tests"))
        if args.archive:
            for rid in archive_evaluated(jobs, args.results / args.id / "runs"):
                print(f"archived {rid} into {args.results / args.id / 'runs'}", file=sys.stderr)
        md = "\n".join(equal_iterations_table(args.id, runs_dir, args.method, args.step, args.against.split(",")))
    except (ConfigError, CompareError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(md)
    if args.out:
        args.out.write_text(md + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
