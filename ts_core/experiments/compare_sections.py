"""The sections of the comparison report after its introduction, each a list of Markdown lines.

    res = Results(data, variants)          # collect's data (finished runs only), variant -> run ids
    md += final_test_section(res, ks) + paired_section(res, ks) + validation_section(res) + ...

write_compare_report (compare_report.py) lays them out in this order: final test accuracy, paired
differences against the baseline, the final in-training evaluation, pass@k (plain and seeded),
entropy and clipping by population, budget, curves, runs. A cell over seeds is mean ± std (`cell`);
a section without data is left out (the final test, the paired differences) or says so (a table
without rows reads `_no data yet_`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thinking_seeds.evals.report import format_cell
from thinking_seeds.experiments.claims import mean_ci, paired
from thinking_seeds.experiments.claims_tables import _table
from thinking_seeds.experiments.compare_data import ACTOR, POPULATIONS, mean_std, test_ks
from thinking_seeds.experiments.compare_plots import PLOTS
from thinking_seeds.experiments.members import base_point_variant

__all__ = [
    "Results",
    "baseline",
    "budget_section",
    "cell",
    "curves_section",
    "entropy_section",
    "final_test_section",
    "md_table",
    "paired_section",
    "pass_at_k_sections",
    "runs_section",
    "validation_section",
]


def cell(values: list[float], digits: int = 4, count: bool = False) -> str:
    """mean ± std (sample) of the finite values; `count`: a step or iteration count, shown once
    when every seed agrees."""
    s = mean_std(values)
    if s is None:
        return "—"
    mean, std, n = s
    fmt = f"{{:.{digits}f}}" if digits else "{:,.0f}"
    if count and std == 0:
        return fmt.format(mean)
    return fmt.format(mean) + (f" ± {fmt.format(std)}" if n > 1 else "")


def md_table(columns: list[str], rows: list[list[str]]) -> str:
    """claims_tables' Markdown table as one text; a table without rows says so."""
    return "\n".join(_table(columns, rows)) if rows else "_no data yet_\n"


@dataclass
class Results:
    """What every section reads: collect's data (its per_run and curves without the unfinished
    runs) and the variants, each with its run ids in member order."""

    data: dict[str, Any]
    variants: dict[str, list[str]]

    @property
    def per_run(self) -> dict[str, dict[str, float]]:
        return self.data["per_run"]

    def vals(self, runs: list[str], name: str) -> list[float]:
        """Metric `name` of each run (NaN where a run lacks it)."""
        return [self.per_run.get(r, {}).get(name, float("nan")) for r in runs]

    def n_done(self, runs: list[str]) -> int:
        """Runs that finished (final test taken, or last policy evaluated): a comparison still running
        has planned runs without results, or with only their first evaluations."""

        def finished(r: str) -> bool:
            v, cfg = self.per_run.get(r, {}), self.data["configs"].get(r) or {}
            if "test/accuracy" in v:
                return True
            return v.get("final_step") == cfg["iterations"] if "iterations" in cfg else "final_step" in v

        return sum(1 for r in runs if finished(r))


def _metric_table(res: Results, columns: Sequence[tuple[str, str, int, bool]], seeds: bool = False) -> str:
    """One row per variant: each column (header, metric, digits, count) a `cell` over the variant's runs;
    `seeds`: a column of how many of them finished, after the variant's name."""
    head = ["variant", *(["seeds"] if seeds else []), *(h for h, *_ in columns)]
    rows = [
        [v, *([str(res.n_done(runs))] if seeds else []), *(cell(res.vals(runs, n), d, c) for _, n, d, c in columns)]
        for v, runs in res.variants.items()
    ]
    return md_table(head, rows)


def final_test_section(res: Results, ks: Sequence[int]) -> list[str]:
    """Every final policy (and θ_0) on the whole test split; nothing before any run took the final test."""
    per_run = res.per_run
    if not any("test/accuracy" in v for v in per_run.values()):
        return []
    n_test = next((int(v["test/prompts"]) for v in per_run.values() if "test/prompts" in v), 0)
    tks = test_ks(per_run, ks)
    n_samples = max(tks)
    md = [
        f"## Final test accuracy: every final policy on all {n_test} test prompts",
        "",
        f"The headline numbers: each run's final policy sampled {n_samples} times (T=1) on the whole test "
        "split, which no setting was chosen on (`thinking_seeds.pipeline.checkpoint_eval`). θ_0 is the base "
        "model every run "
        "starts from.",
        "",
    ]
    patterns = any("test/distinct_patterns" in v for v in per_run.values())
    div = "test/distinct_patterns" if patterns else "test/strategy_b"
    cols = (
        ["variant", "seeds", "accuracy (pass@1)"]
        + [f"pass@{k}" for k in tks[1:]]
        + ["distinct patterns / prompt" if div == "test/distinct_patterns" else "strategy b"]
    )
    rows = []
    if res.data["base_test"]:
        b = res.data["base_test"]
        rows.append(
            ["θ_0 (base model)", "—", format_cell(b.get("test/accuracy"))]
            + [format_cell(b.get(f"test/pass@{k}")) for k in tks[1:]]
            + [format_cell(b.get(div))]
        )
    rows += [
        [v, str(res.n_done(runs)), cell(res.vals(runs, "test/accuracy"))]
        + [cell(res.vals(runs, f"test/pass@{k}")) for k in tks[1:]]
        + [cell(res.vals(runs, div))]
        for v, runs in res.variants.items()
    ]
    md.append(md_table(cols, rows))
    return md


def baseline(res: Results) -> str | None:
    """What the paired table subtracts: the ablation's reference point, else the sweep's own base
    point (members.base_point_variant), else grpo, else nothing."""
    ref = next((m.get("variant") for m in res.data["members"] if m.get("reference")), None)
    if ref in res.variants:
        return ref
    base = base_point_variant(res.data["members"])
    if base in res.variants and len(res.variants) > 1:
        return base
    return "grpo" if "grpo" in res.variants and len(res.variants) > 1 else None


def _paired_cell(d: list[tuple[int, float]]) -> str:
    """mean ± std of the per-seed differences, their 95% t-interval (two seeds or more), each seed's."""
    if not d:
        return "—"
    xs = [x for _, x in d]
    text = f"{statistics.fmean(xs):+.4f}"
    if len(d) > 1:
        ci = mean_ci(xs)
        text += f" ± {statistics.stdev(xs):.4f} [{ci[1]:+.4f}, {ci[2]:+.4f}]"
    return text + " (" + ", ".join(f"s{sd}: {x:+.3f}" for sd, x in d) + ")"


def paired_section(res: Results, ks: Sequence[int], against: str | None = None) -> list[str]:
    """Each variant minus the baseline (or `against`) at the same seed; nothing without a baseline."""
    base_variant = against or baseline(res)
    if not base_variant:
        return []
    per_run = res.per_run
    names = [
        n
        for n in (
            "test/accuracy",
            f"test/pass@{max(test_ks(per_run, ks))}",
            "hard/ever_solved",
            "test/distinct_patterns",
            "eval/accuracy",
            "test/strategy_b",
            "eval/strategy_b",
        )
        if any(n in per_run.get(r, {}) for r in res.variants[base_variant])
    ]
    diffs = {
        v: {n: paired(res.data, res.variants, v, base_variant, n) for n in names}
        for v in res.variants
        if v != base_variant
    }
    md = [
        f"## Paired differences against `{base_variant}` (same seed)",
        "",
        "Each cell: mean ± std over seeds of (variant − baseline) at the same seed, [the 95% t-interval of "
        "the mean] with two or more seeds, then the per-seed differences. Same seed = same training prompts "
        "per iteration and the same evaluation prompts and sampling seed.",
        "",
    ]
    label = {
        "test/accuracy": "test accuracy",
        "eval/accuracy": "validation accuracy",
        "test/strategy_b": "test strategy b",
        "eval/strategy_b": "validation strategy b",
        "hard/ever_solved": "hard prompts solved at least once",
        "test/distinct_patterns": "test distinct patterns / prompt",
    }
    label.update({n: f"test {n[5:]}" for n in names if n.startswith("test/pass@")})
    rows = [[v] + [_paired_cell(per_name.get(n, [])) for n in names] for v, per_name in diffs.items()]
    md.append(md_table(["variant"] + [label[n] for n in names], rows))
    return md


def validation_section(res: Results) -> list[str]:
    """The last in-training evaluation of each run (validation split)."""
    columns = [
        ("final step", "final_step", 0, True),
        ("accuracy", "eval/accuracy", 4, False),
        ("strategy b", "eval/strategy_b", 4, False),
        ("seeded accuracy", "eval_seeded/accuracy", 4, False),
        ("distinct correct / prompt", "eval/distinct_correct_solutions", 2, False),
    ]
    return ["## Final in-training evaluation (validation)", "", _metric_table(res, columns, seeds=True)]


def pass_at_k_sections(res: Results, ks: Sequence[int]) -> list[str]:
    """pass@k of the last evaluation, plain sampling and seeded sampling."""
    md: list[str] = []
    for prefix, title in (
        ("eval", "pass@k, plain sampling"),
        (
            "eval_seeded",
            "pass@k, seeded sampling (historical prefix + current continuation): the explorable solution space",
        ),
    ):
        md += [f"## {title}", "", _metric_table(res, [(f"pass@{k}", f"{prefix}/pass@{k}", 4, False) for k in ks])]
    return md


def entropy_section(res: Results, last: int) -> list[str]:
    """Entropy (first and last `last` iterations) and clip fractions, per variant and population."""
    md = [
        f"## Entropy and clipping by population (means over the first and the last {last} iterations)",
        "",
        "Entropy of the policy being trained on each population's tokens (per-iteration values are noisy: "
        "the plots show a moving average). Clip fractions are over the last iterations.",
        "",
    ]
    rows = []
    for v, runs in res.variants.items():
        for pop in POPULATIONS:
            cells = [cell(res.vals(runs, f"{when}actor/{a}/{pop}")) for a in ACTOR[:2] for when in ("first/", "")]
            cells += [cell(res.vals(runs, f"actor/{a}/{pop}")) for a in ACTOR[2:]]
            if any(c != "—" for c in cells):
                rows.append([v, pop] + cells)
    columns = [
        "variant",
        "population",
        f"entropy, first {last}",
        f"entropy, last {last}",
        f"effective entropy, first {last}",
        f"effective entropy, last {last}",
        "clip fraction",
        "clip fraction (|A|-weighted)",
    ]
    md.append(md_table(columns, rows))
    return md


def budget_section(res: Results) -> list[str]:
    """Iterations, training seconds and tokens (generated, drafted, SFT) per variant."""
    md = [
        "## Budget",
        "",
        "Generated tokens are summed over the whole run: the continuation stage (on-policy samples and the "
        "continuations of seeds) and the historical drafts the seeds were cut from. Train seconds are the "
        "training stages' wall time (their `time/*` metrics; evaluation excluded, and seeds sampled in a thread "
        "beside the update not counted twice); the SFT control trains for their mean.",
        "",
    ]
    columns = [
        ("iterations", "budget/iterations_done", 0, True),
        ("train seconds", "budget/train_seconds", 1, False),
        ("generated tokens (continuation)", "budget/generated_tokens", 0, False),
        ("seed draft tokens", "budget/seed_draft_tokens", 0, False),
        ("total generated", "budget/total_generated_tokens", 0, False),
        ("SFT tokens", "budget/sft_tokens", 0, False),
    ]
    return [*md, _metric_table(res, columns)]


def curves_section(plot_paths: dict[str, Path | None]) -> list[str]:
    """The plots, in PLOTS order; a plot without data says so."""
    md = ["## Curves", ""]
    for stem, path in plot_paths.items():
        patterns_drawn = plot_paths.get("distinct_patterns") is not None
        if path is None and (stem == "distinct_patterns" or (stem == "strategy_b" and patterns_drawn)):
            continue  # each task has one of the two diversity curves (chain_sum: strategy b; countdown: patterns)
        md += [f"### {PLOTS[stem]}", "", f"![{PLOTS[stem]}]({stem}.png)" if path is not None else "_no data yet_", ""]
    return md


def runs_section(res: Results, ks: Sequence[int]) -> list[str]:
    """One row per run with its final numbers (as in results.parquet)."""
    md = ["## Runs", "", "Every run's final numbers (also in `results.parquet`).", ""]
    rows = []
    for m in res.data["members"]:
        v = res.per_run.get(m["run_id"], {})
        rows.append(
            [
                m["run_id"],
                m.get("variant", m["method"]),
                str(m.get("seed")),
                format_cell(int(v["final_step"])) if "final_step" in v else "—",
            ]
            + [
                format_cell(v.get(n))
                for n in (
                    "eval/accuracy",
                    "eval/pass@1",
                    f"eval/pass@{ks[-1]}",
                    f"eval_seeded/pass@{ks[-1]}",
                    "eval/strategy_b",
                    "actor/entropy/all",
                    "budget/train_seconds",
                )
            ]
            + [format_cell(int(v["budget/total_generated_tokens"])) if "budget/total_generated_tokens" in v else "—"]
            + [format_cell(v.get("test/accuracy"))]
        )
    columns = [
        "run",
        "variant",
        "seed",
        "final step",
        "validation accuracy",
        "pass@1",
        f"pass@{ks[-1]}",
        f"seeded pass@{ks[-1]}",
        "strategy b",
        "entropy (all)",
        "train seconds",
        "generated tokens",
        "test accuracy",
    ]
    md.append(md_table(columns, rows))
    return md
