"""The comparison report: every run of a comparison, grouped by method (and sweep point) over seeds.

    write_compare_report("cmp", Path("runs"), Path("docs/results/cmp"), command="ts compare ...")
      -> docs/results/cmp/report.md            tables (mean ± std over seeds) and the plots below
         docs/results/cmp/results.parquet      one row per run with its final metrics
         docs/results/cmp/{accuracy,strategy_b,entropy,effective_entropy,clip_fraction,pass_at_k}.png

The numbers come from compare_data.collect (DuckDB over the runs' files), the claims tables from
claims.py, the plots from compare_plots.py; this module lays them out. Runs restored from a
committed archive (archive.py) are named as such. Every file is written atomically, the Markdown
last. Never imports prefect.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from thinking_seeds.evals.report import format_cell
from thinking_seeds.experiments.claims import claims_markdown, mean_ci
from thinking_seeds.experiments.compare_data import (
    ACTOR,
    POPULATIONS,
    collect,
    mean_std,
    paired_differences,
    pass_ks,
    results_table,
    test_ks,
)
from thinking_seeds.experiments.compare_plots import PLOTS, plots
from thinking_seeds.experiments.members import archive_record
from thinking_seeds.experiments.spec import CONTROL_METHOD
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.parquet_io import write_table_atomic

__all__ = ["write_compare_report"]


def _cell(values: list[float], digits: int = 4, count: bool = False) -> str:
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


def _baseline(data: dict[str, Any], variants: dict[str, list[str]]) -> str | None:
    """What the paired table subtracts: the ablation's reference point, else grpo, else nothing."""
    ref = next((m.get("variant") for m in data["members"] if m.get("reference")), None)
    if ref in variants:
        return ref
    return "grpo" if "grpo" in variants and len(variants) > 1 else None


def _md_table(columns: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "_no data yet_\n"
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _archived(data: dict[str, Any], runs_dir: Path) -> list[str]:
    """The sentence naming the runs restored from a committed archive (archive.py), one per archive."""
    where: dict[str, list[str]] = defaultdict(list)
    for m in data["members"]:
        rec = archive_record(runs_dir / m["run_id"])
        if rec is not None:
            where[rec.get("archive", "?")].append(m["run_id"])
    return [
        f"{len(ids)} of these runs come from the committed archive `{path}` (finished in an earlier session; "
        f"`ts compare --archive` keeps their result files, not their checkpoints): {', '.join(ids)}."
        for path, ids in where.items()
    ]


def _shared(cfg: dict[str, Any]) -> str:
    r, e = cfg.get("rollout", {}), cfg.get("eval", {})
    d, mdl = cfg.get("data", {}), cfg.get("model", {})
    return (
        f"model `{mdl.get('path')}`, task `{d.get('source')}`, {cfg.get('iterations')} iterations × "
        f"{r.get('prompts_per_iteration')} prompts × {r.get('group_size')} samples per prompt "
        f"(max {r.get('max_new_tokens')} new tokens, T={r.get('temperature')}); evaluation every "
        f"{e.get('every')} iterations on {e.get('prompts')} `{e.get('split')}` prompts × {e.get('samples')} "
        f"samples at T={e.get('temperature')}"
    )


def write_compare_report(
    compare_id: str,
    runs_dir: Path,
    out_dir: Path,
    command: str | None = None,
    last: int = 10,
    reference: str | None = None,
) -> Path:
    """Write report.md, results.parquet and the PNG plots of comparison `compare_id` into `out_dir`.

    `command` (the exact command line that produced it) is quoted at the top. Raises DataError
    when no run of the comparison exists. Returns the Markdown's path.
    """
    runs_dir, out = Path(runs_dir), Path(out_dir)
    data = collect(compare_id, runs_dir, last, reference)
    out.mkdir(parents=True, exist_ok=True)
    variants: dict[str, list[str]] = defaultdict(list)
    for m in data["members"]:
        variants[m.get("variant", m["method"])].append(m["run_id"])
    variants = dict(variants)
    per_run = data["per_run"]

    def vals(runs: list[str], name: str) -> list[float]:
        return [per_run.get(r, {}).get(name, float("nan")) for r in runs]

    def n_done(runs: list[str]) -> int:
        """Runs that finished (final test taken, or last policy evaluated): a comparison still running
        has planned runs without results, or with only their first evaluations."""

        def finished(r: str) -> bool:
            v, cfg = per_run.get(r, {}), data["configs"].get(r) or {}
            if "test/accuracy" in v:
                return True
            return v.get("final_step") == cfg["iterations"] if "iterations" in cfg else "final_step" in v

        return sum(1 for r in runs if finished(r))

    done = n_done([m["run_id"] for m in data["members"]])
    # A run still training has first evaluations and per-iteration metrics: none of it may enter a
    # table, a paired difference or a curve until the run has finished.
    unfinished = {m["run_id"] for m in data["members"] if not n_done([m["run_id"]])}
    for r in unfinished:
        per_run.pop(r, None)
        data["curves"].pop(r, None)

    claims = claims_markdown(data, variants, runs_dir)  # also adds hard/* values to data
    results = results_table(data, compare_id)
    write_table_atomic(results, out / "results.parquet")
    ks = pass_ks(per_run)
    plot_paths = plots(out, data, variants, ks)

    md = [f"# Comparison: {compare_id}", ""]
    if command:
        md += ["Produced by:", "", "```", command, "```", ""]
    seeds = sorted({m.get("seed") for m in data["members"]})
    rl = [m for m in data["members"] if m["method"] != CONTROL_METHOD]
    ref_cfg = data["configs"].get(rl[0]["run_id"]) if rl else None
    md.append(
        f"Generated {datetime.now(UTC).isoformat(timespec='seconds')} from `{runs_dir.resolve()}`: "
        + (
            f"{len(data['members'])} runs"
            if done == len(data["members"])
            else f"{done} of the {len(data['members'])} planned runs have results so far (the comparison is incomplete)"
        )
        + f", {len(variants)} variants, seeds {', '.join(map(str, seeds))}. "
        "Cells are mean ± std over seeds (sample std; a single seed shows its value)."
    )
    md.append("")
    for line in _archived(data, runs_dir):
        md += [line, ""]
    if claims:
        md += [claims, ""]
    if ref_cfg:
        md.append(f"Shared budget of every run (checked when the comparison was planned): {_shared(ref_cfg)}.")
        md.append("")
    ctl = [m for m in data["members"] if m["method"] == CONTROL_METHOD]
    if ctl:
        states = [
            json.loads((runs_dir / m["run_id"] / "control.json").read_text())
            for m in ctl
            if (runs_dir / m["run_id"] / "control.json").is_file()
        ]
        if states:
            b = statistics.fmean(s.get("budget_seconds", float("nan")) for s in states)
            st = statistics.fmean(s.get("steps", 0) for s in states)
            md.append(
                f"`{CONTROL_METHOD}`: the supervised warm-up continued from the same base model for the mean "
                f"training time of the RL runs ({b:.1f} s; {st:.0f} SFT steps on average), evaluated exactly "
                "like them. Its x axis is compute: step k = k/iterations of that time."
            )
            md.append("")

    if any("test/accuracy" in v for v in per_run.values()):
        n_test = next((int(v["test/prompts"]) for v in per_run.values() if "test/prompts" in v), 0)
        tks = test_ks(per_run, ks)
        n_samples = max(tks)
        md += [
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
        if data["base_test"]:
            b = data["base_test"]
            rows.append(
                ["θ_0 (base model)", "—", format_cell(b.get("test/accuracy"))]
                + [format_cell(b.get(f"test/pass@{k}")) for k in tks[1:]]
                + [format_cell(b.get(div))]
            )
        rows += [
            [v, str(n_done(runs)), _cell(vals(runs, "test/accuracy"))]
            + [_cell(vals(runs, f"test/pass@{k}")) for k in tks[1:]]
            + [_cell(vals(runs, div))]
            for v, runs in variants.items()
        ]
        md.append(_md_table(cols, rows))
    base_variant = _baseline(data, variants)
    if base_variant:
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
            if any(n in per_run.get(r, {}) for r in variants[base_variant])
        ]
        diffs = paired_differences(data, variants, base_variant, names)
        md += [
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
        rows = []
        for v, per_name in diffs.items():
            cells = []
            for n in names:
                d = per_name.get(n, [])
                ci = mean_ci([x for _, x in d])
                cells.append(
                    (
                        f"{statistics.fmean(x for _, x in d):+.4f}"
                        + (
                            f" ± {statistics.stdev([x for _, x in d]):.4f} [{ci[1]:+.4f}, {ci[2]:+.4f}]"
                            if len(d) > 1
                            else ""
                        )
                        + " ("
                        + ", ".join(f"s{sd}: {x:+.3f}" for sd, x in d)
                        + ")"
                    )
                    if d
                    else "—"
                )
            rows.append([v] + cells)
        md.append(_md_table(["variant"] + [label[n] for n in names], rows))
    md += ["## Final in-training evaluation (validation)", ""]
    cols = ["variant", "seeds", "final step", "accuracy", "strategy b", "seeded accuracy", "distinct correct / prompt"]
    rows = [
        [
            v,
            str(n_done(runs)),
            _cell(vals(runs, "final_step"), 0, count=True),
            _cell(vals(runs, "eval/accuracy")),
            _cell(vals(runs, "eval/strategy_b")),
            _cell(vals(runs, "eval_seeded/accuracy")),
            _cell(vals(runs, "eval/distinct_correct_solutions"), 2),
        ]
        for v, runs in variants.items()
    ]
    md.append(_md_table(cols, rows))
    for prefix, title in (
        ("eval", "pass@k, plain sampling"),
        (
            "eval_seeded",
            "pass@k, seeded sampling (historical prefix + current continuation): the explorable solution space",
        ),
    ):
        md += [f"## {title}", ""]
        rows = [[v] + [_cell(vals(runs, f"{prefix}/pass@{k}")) for k in ks] for v, runs in variants.items()]
        md.append(_md_table(["variant"] + [f"pass@{k}" for k in ks], rows))
    md += [
        f"## Entropy and clipping by population (means over the first and the last {last} iterations)",
        "",
        "Entropy of the policy being trained on each population's tokens (per-iteration values are noisy: "
        "the plots show a moving average). Clip fractions are over the last iterations.",
        "",
    ]
    rows = []
    for v, runs in variants.items():
        for pop in POPULATIONS:
            cells = [_cell(vals(runs, f"{when}actor/{a}/{pop}")) for a in ACTOR[:2] for when in ("first/", "")]
            cells += [_cell(vals(runs, f"actor/{a}/{pop}")) for a in ACTOR[2:]]
            if any(c != "—" for c in cells):
                rows.append([v, pop] + cells)
    md.append(
        _md_table(
            [
                "variant",
                "population",
                f"entropy, first {last}",
                f"entropy, last {last}",
                f"effective entropy, first {last}",
                f"effective entropy, last {last}",
                "clip fraction",
                "clip fraction (|A|-weighted)",
            ],
            rows,
        )
    )
    md += [
        "## Budget",
        "",
        "Generated tokens are summed over the whole run: the continuation stage (on-policy samples and the "
        "continuations of seeds) and the historical drafts the seeds were cut from. Train seconds sum the "
        "stages' `time/*` metrics (evaluation excluded); the SFT control trains for their mean.",
        "",
    ]
    rows = [
        [
            v,
            _cell(vals(runs, "budget/iterations_done"), 0, count=True),
            _cell(vals(runs, "budget/train_seconds"), 1),
            _cell(vals(runs, "budget/generated_tokens"), 0),
            _cell(vals(runs, "budget/seed_draft_tokens"), 0),
            _cell(vals(runs, "budget/total_generated_tokens"), 0),
            _cell(vals(runs, "budget/sft_tokens"), 0),
        ]
        for v, runs in variants.items()
    ]
    md.append(
        _md_table(
            [
                "variant",
                "iterations",
                "train seconds",
                "generated tokens (continuation)",
                "seed draft tokens",
                "total generated",
                "SFT tokens",
            ],
            rows,
        )
    )
    md += ["## Curves", ""]
    for stem, path in plot_paths.items():
        patterns_drawn = plot_paths.get("distinct_patterns") is not None
        if path is None and (stem == "distinct_patterns" or (stem == "strategy_b" and patterns_drawn)):
            continue  # each task has one of the two diversity curves (chain_sum: strategy b; countdown: patterns)
        md += [f"### {PLOTS[stem]}", "", f"![{PLOTS[stem]}]({stem}.png)" if path is not None else "_no data yet_", ""]
    md += ["## Runs", "", "Every run's final numbers (also in `results.parquet`).", ""]
    rows = []
    for m in data["members"]:
        v = per_run.get(m["run_id"], {})
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
    md.append(
        _md_table(
            [
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
            ],
            rows,
        )
    )
    md.append(f"SQL over these runs: `ts sql \"SELECT * FROM metrics WHERE run_id LIKE '{compare_id}-%'\"`.")
    text = "\n".join(md).rstrip() + "\n"
    return atomic_write(out / "report.md", lambda f: f.write(text), mode="w")
