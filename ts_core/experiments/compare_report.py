"""The comparison report: every run of a comparison, grouped by method (and sweep point) over seeds.

    write_compare_report("cmp", Path("runs"), Path("docs/results/cmp"), command="ts compare ...")
      -> docs/results/cmp/report.md            tables (mean ± std over seeds) and the plots below
         docs/results/cmp/results.parquet      one row per run with its final metrics
         docs/results/cmp/{accuracy,strategy_b,entropy,effective_entropy,clip_fraction,pass_at_k}.png

The runs are found by their `compare.json` markers (written by `thinking_seeds.experiments.compare.run_all` and the SFT
control) and read through `thinking_seeds.store.sql` (read-only DuckDB over all runs). Per run, "final" means
the last evaluated policy step; entropy, effective entropy and clip fractions are the mean over the
last `last` update iterations; the budget columns are sums over the whole run (generated tokens of
the continuation stage, tokens of the historical drafts that seeds were cut from, training seconds
from the `time/*` stage metrics, evaluation excluded). Every file is written atomically, the
Markdown last. Never imports prefect.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa

from thinking_seeds.experiments.compare import (CONTROL_METHOD, DEFAULT_METHODS, FINAL_TEST_STAGE, TRAINING_TIME_SQL, compare_members,
                      reference_members, spec_of)
from thinking_seeds.experiments.claims import claims_markdown, mean_ci
from thinking_seeds.config import ALGORITHMS
from thinking_seeds.store.parquet_io import DataError, write_table_atomic
from thinking_seeds.evals.report import _write_atomic, format_cell
from thinking_seeds.store.sql import connect, query

__all__ = ["PASS_KS", "POPULATIONS", "collect", "pass_ks", "result_columns", "write_compare_report"]

POPULATIONS = ("on_policy", "continuation", "prefix", "all")
PASS_KS = (1, 2, 4, 8, 16)
ACTOR = ("entropy", "effective_entropy", "pg_clipfrac", "pg_clipfrac_adv")
AGE = ("prefix_abs_log_ratio",)  # by seed source age (thinking_seeds.train.trainer): how off-policy the seeds are
PLOTS = {
    "accuracy": "Held-out accuracy (eval/accuracy), mean ± std over seeds",
    "strategy_b": "Task diversity: share of strategy-b solutions (eval/strategy_b)",
    "distinct_patterns": "Task diversity: distinct correct sign patterns per prompt (eval/distinct_patterns)",
    "entropy": "Token entropy by population (actor/entropy)",
    "effective_entropy": "Effective entropy by population (actor/effective_entropy)",
    "clip_fraction": "Gradient lost to clipping by population (actor/pg_clipfrac)",
    "pass_at_k": "pass@k at the final step: plain (solid) vs seeded (dashed) sampling",
}


def _sql_list(ids: Sequence[str]) -> str:
    return ", ".join("'" + i.replace("'", "''") + "'" for i in ids)


def _finite(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _order(marker: dict[str, Any]) -> tuple:
    m = marker["method"]
    rank = (DEFAULT_METHODS.index(m) if m in DEFAULT_METHODS else
            len(DEFAULT_METHODS) + ALGORITHMS.index(m) if m in ALGORITHMS else 99)
    return (m == CONTROL_METHOD, rank, "reference" not in marker, marker.get("variant", m), marker.get("seed", 0))


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def collect(compare_id: str, runs_dir: Path, last: int = 10, reference: str | None = None) -> dict[str, Any]:
    """Everything the report shows, read with DuckDB: markers, per-run finals, series, configs.

    With `reference`, the unswept runs of that comparison with the same methods and seeds join
    the report as the ablation's base point (`thinking_seeds.experiments.compare.reference_members`).
    """
    members = compare_members(compare_id, runs_dir)
    if not members:
        raise DataError(f"no runs of comparison {compare_id!r} under {runs_dir} (no run directory has a compare.json "
                        f"with that id); run `ts compare --id {compare_id} ...` first")
    if reference:
        members += reference_members(reference, [spec_of(m) for m in members if m["method"] != CONTROL_METHOD], runs_dir)
    members = sorted(members, key=_order)
    ids = _sql_list([m["run_id"] for m in members])
    con = connect(runs_dir=runs_dir)
    try:
        finals = query(con, f"""
            WITH m AS (SELECT * FROM metrics WHERE run_id IN ({ids})),
            ev AS (SELECT run_id, iteration, name, value FROM m WHERE stage = 'evaluate'),
            fin AS (SELECT run_id, max(iteration) AS final_step FROM ev WHERE name = 'eval/accuracy' GROUP BY run_id),
            act AS (SELECT run_id, iteration, name, value FROM m
                    WHERE stage = 'update' AND ({' OR '.join(f"starts_with(name, 'actor/{a}/')" for a in ACTOR + AGE)})),
            actlast AS (SELECT run_id, max(iteration) AS last_it FROM act GROUP BY run_id)
            SELECT ev.run_id, ev.name, ev.value FROM ev JOIN fin ON ev.run_id = fin.run_id AND ev.iteration = fin.final_step
            UNION ALL SELECT run_id, 'final_step', final_step FROM fin
            UNION ALL SELECT act.run_id, act.name, avg(act.value) FILTER (WHERE NOT isnan(act.value))
                      FROM act JOIN actlast USING (run_id) WHERE act.iteration > actlast.last_it - {int(last)}
                      GROUP BY act.run_id, act.name
            UNION ALL SELECT run_id, 'first/' || name, avg(value) FILTER (WHERE NOT isnan(value))
                      FROM act WHERE iteration < {int(last)} GROUP BY run_id, name
            UNION ALL SELECT run_id, 'budget/iterations_done', count(DISTINCT iteration) FROM m
                      WHERE stage IN ('update', 'sft') GROUP BY run_id
            UNION ALL SELECT run_id, 'budget/generated_tokens', sum(value) FROM m
                      WHERE name = 'rollout/generated_tokens' GROUP BY run_id
            UNION ALL SELECT run_id, 'budget/seed_draft_tokens', sum(draft_len) FROM prefixes
                      WHERE run_id IN ({ids}) AND source_step >= 0 GROUP BY run_id
            UNION ALL SELECT run_id, 'budget/train_seconds', sum(value) FROM m
                      WHERE {TRAINING_TIME_SQL} GROUP BY run_id
            UNION ALL SELECT run_id, 'budget/sft_tokens', max(value) FROM m WHERE name = 'sft/tokens' GROUP BY run_id
            UNION ALL SELECT run_id, 'budget/sft_steps', max(value) FROM m WHERE name = 'sft/steps' GROUP BY run_id
            UNION ALL SELECT m.run_id, 'test/' || substr(m.name, 6), m.value FROM m
                      JOIN (SELECT run_id, max(iteration) AS it FROM m WHERE stage = '{FINAL_TEST_STAGE}' GROUP BY run_id) ft
                      ON m.run_id = ft.run_id AND m.iteration = ft.it
                      WHERE m.stage = '{FINAL_TEST_STAGE}' AND starts_with(m.name, 'eval/')
        """)
        base = query(con, f"""
            SELECT substr(name, 6), avg(value) FROM metrics
            WHERE run_id IN ({ids}) AND stage = '{FINAL_TEST_STAGE}' AND iteration = 0 AND starts_with(name, 'eval/')
            GROUP BY name""")
        series = query(con, f"""
            SELECT run_id, stage, iteration, name, value FROM metrics
            WHERE run_id IN ({ids}) AND (
                (stage = 'evaluate' AND (name IN ('eval/accuracy', 'eval/strategy_b', 'eval/distinct_patterns')))
                OR (stage = 'update' AND ({' OR '.join(f"starts_with(name, 'actor/{a}/')" for a in ACTOR[:3])})))
            ORDER BY run_id, iteration
        """)
        configs = query(con, f"SELECT run_id, config_json FROM configs WHERE run_id IN ({ids})")
    finally:
        con.close()
    per_run: dict[str, dict[str, float]] = defaultdict(dict)
    for run_id, name, value in finals.rows:
        if value is not None:
            per_run[run_id][name] = float(value)
    for v in per_run.values():
        if "budget/generated_tokens" in v or "budget/seed_draft_tokens" in v:
            v["budget/total_generated_tokens"] = v.get("budget/generated_tokens", 0.0) + v.get("budget/seed_draft_tokens", 0.0)
    curves: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for run_id, _stage, it, name, value in series.rows:
        if _finite(value):
            curves[run_id][name].append((int(it), float(value)))
    cfgs = {r: json.loads(c) for r, c in configs.rows if c}
    return {"members": members, "per_run": per_run, "curves": curves, "configs": cfgs,
            "base_test": {f"test/{n}": float(v) for n, v in base.rows if v is not None}}


def _stats(values: list[float]) -> tuple[float, float, int] | None:
    vs = [v for v in values if _finite(v)]
    if not vs:
        return None
    return statistics.fmean(vs), (statistics.stdev(vs) if len(vs) > 1 else 0.0), len(vs)


def _cell(values: list[float], digits: int = 4, count: bool = False) -> str:
    """mean ± std (sample) of the finite values; `count`: a step or iteration count, shown once
    when every seed agrees."""
    s = _stats(values)
    if s is None:
        return "—"
    mean, std, n = s
    fmt = f"{{:.{digits}f}}" if digits else "{:,.0f}"
    if count and std == 0:
        return fmt.format(mean)
    return fmt.format(mean) + (f" ± {fmt.format(std)}" if n > 1 else "")


def paired_differences(data: dict[str, Any], variants: dict[str, list[str]], baseline: str,
                       names: Sequence[str]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Per variant and metric: [(seed, value - baseline's value at the same seed)], seeds both ran.

    Runs of one seed share the training prompts of every iteration and the evaluation prompts and
    sampling seed (thinking_seeds.pipeline.stages.stage_seed), so differences at equal seeds cancel that part of
    the noise; their spread is the honest error bar for "method X beats the baseline".
    """
    seed_of = {m["run_id"]: m.get("seed") for m in data["members"]}
    per_run = data["per_run"]
    base = {seed_of[r]: per_run.get(r, {}) for r in variants[baseline]}
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for v, runs in variants.items():
        if v == baseline:
            continue
        out[v] = {}
        for name in names:
            diffs = []
            for r in runs:
                a, b = per_run.get(r, {}).get(name), base.get(seed_of[r], {}).get(name)
                if _finite(a) and _finite(b):
                    diffs.append((seed_of[r], a - b))
            out[v][name] = sorted(diffs)
    return out


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


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------


SMOOTH = 10  # iterations in the moving average of the per-iteration (update) curves


def _smooth(pts: list[tuple[int, float]], window: int = SMOOTH) -> list[tuple[int, float]]:
    """Trailing moving average over `window` points: per-iteration entropy and clip fractions move
    by more from one batch to the next than over the whole run, which hides the trend."""
    out, ys = [], []
    for x, y in pts:
        ys.append(y)
        out.append((x, statistics.fmean(ys[-window:])))
    return out


def _band(per_seed: list[list[tuple[int, float]]]) -> tuple[list[int], list[float], list[float]]:
    by_x: dict[int, list[float]] = defaultdict(list)
    for pts in per_seed:
        for x, y in pts:
            by_x[x].append(y)
    xs = sorted(by_x)
    means = [statistics.fmean(by_x[x]) for x in xs]
    stds = [statistics.stdev(by_x[x]) if len(by_x[x]) > 1 else 0.0 for x in xs]
    return xs, means, stds


def _figure(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (7, 4)):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(nrows * ncols)]
    return fig, axes


def _draw(ax, groups: dict[str, list[list[tuple[int, float]]]], colors: dict[str, str], title: str,
          ylabel: str, unit: bool = False) -> bool:
    from matplotlib.ticker import MaxNLocator

    drawn = False
    for variant, per_seed in groups.items():
        per_seed = [p for p in per_seed if p]
        if not per_seed:
            continue
        xs, ms, ss = _band(per_seed)
        ax.plot(xs, ms, marker="o", markersize=3, label=variant, color=colors[variant])
        if any(ss):
            ax.fill_between(xs, [m - s for m, s in zip(ms, ss)], [m + s for m, s in zip(ms, ss)],
                            color=colors[variant], alpha=0.2, linewidth=0)
        drawn = True
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("iteration (policy step)", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if unit:
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
    return drawn


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    return _write_atomic(path, lambda f: fig.savefig(f, format="png"))


def _plots(out: Path, data: dict[str, Any], variants: dict[str, list[str]], ks: list[int]) -> dict[str, Path | None]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    colors = {v: cmap(i % 10) for i, v in enumerate(variants)}
    curves = data["curves"]

    def groups(name: str, smooth: bool = False) -> dict[str, list[list[tuple[int, float]]]]:
        pick = (lambda pts: _smooth(pts)) if smooth else (lambda pts: pts)
        return {v: [pick(curves[r].get(name, [])) for r in runs] for v, runs in variants.items()}

    paths: dict[str, Path | None] = {}
    for stem, name, ylabel in (("accuracy", "eval/accuracy", "accuracy (avg@n)"),
                               ("strategy_b", "eval/strategy_b", "share of strategy b"),
                               ("distinct_patterns", "eval/distinct_patterns", "distinct patterns / prompt")):
        fig, (ax,) = _figure()
        drawn = _draw(ax, groups(name), colors, PLOTS[stem], ylabel, unit=stem != "distinct_patterns")
        paths[stem] = _save(fig, out / f"{stem}.png") if drawn else None
    for stem, metric, ylabel in (("entropy", "entropy", "entropy (nats)"),
                                 ("effective_entropy", "effective_entropy", "entropy (nats)"),
                                 ("clip_fraction", "pg_clipfrac", "fraction of tokens clipped")):
        fig, axes = _figure(2, 2, (11, 7))
        drawn = [_draw(ax, groups(f"actor/{metric}/{pop}", smooth=True), colors, f"{pop}", ylabel)
                 for ax, pop in zip(axes, POPULATIONS)]
        fig.suptitle(f"{PLOTS[stem]}, {SMOOTH}-iteration moving average", fontsize=10)
        paths[stem] = _save(fig, out / f"{stem}.png") if any(drawn) else None
    # pass@k at the final step, plain vs seeded
    fig, (ax,) = _figure()
    drawn = False
    for v, runs in variants.items():
        for prefix, style in (("eval", "-"), ("eval_seeded", "--")):
            xs, ms = [], []
            for k in ks:
                s = _stats([data["per_run"].get(r, {}).get(f"{prefix}/pass@{k}", float("nan")) for r in runs])
                if s is not None:
                    xs.append(k)
                    ms.append(s[0])
            if xs:
                ax.plot(xs, ms, style, marker="o", markersize=3, color=colors[v],
                        label=f"{v} ({'seeded' if prefix == 'eval_seeded' else 'plain'})")
                drawn = True
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("k", fontsize=8)
    ax.set_ylabel("pass@k", fontsize=8)
    ax.set_title(PLOTS["pass_at_k"], fontsize=9)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=6)
    paths["pass_at_k"] = _save(fig, out / "pass_at_k.png") if drawn else None
    for stem, p in paths.items():
        stale = out / f"{stem}.png"
        if p is None and stale.exists():
            stale.unlink()  # an old plot must not pass for this report's
    return paths


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------

def pass_ks(per_run: dict[str, dict[str, float]]) -> list[int]:
    """The k of every eval/pass@k present (PASS_KS when there is none yet)."""
    ks = {int(n.rsplit("@", 1)[1]) for v in per_run.values() for n in v if n.startswith(("eval/pass@", "eval_seeded/pass@"))}
    return sorted(ks) or list(PASS_KS)


def test_ks(per_run: dict[str, dict[str, float]], ks: Sequence[int]) -> list[int]:
    """The k of the final test's pass@k (it may sample more than the in-training evaluation)."""
    return sorted({int(n.rsplit("@", 1)[1]) for v in per_run.values() for n in v if n.startswith("test/pass@")}) or list(ks)


# Columns that only a task with solution labels (countdown) and a θ_0 per-prompt file produce.
EXTRA_COLUMNS = ("test/distinct_patterns", "test/pattern_entropy", "eval/distinct_patterns", "eval/pattern_entropy",
                 "hard/accuracy", "hard/ever_solved", "hard/distinct_patterns")


def result_columns(ks: Sequence[int], tks: Sequence[int] | None = None, extra: Sequence[str] = ()) -> list[str]:
    """The metric columns of results.parquet, in order."""
    return (["test/accuracy"] + [f"test/pass@{k}" for k in (tks or ks)] + list(extra) + ["test/strategy_b", "test/prompts",
             "final_step", "eval/accuracy", "eval/strategy_a", "eval/strategy_b", "eval/strategy_other",
             "eval/distinct_correct_solutions", "eval/mean_response_len"]
            + [f"eval/pass@{k}" for k in ks]
            + ["eval_seeded/accuracy", "eval_seeded/strategy_b", "eval_seeded/distinct_correct_solutions"]
            + [f"eval_seeded/pass@{k}" for k in ks]
            + [f"actor/{a}/{p}" for a in ACTOR for p in POPULATIONS]
            + ["budget/iterations_done", "budget/train_seconds", "budget/generated_tokens", "budget/seed_draft_tokens",
               "budget/total_generated_tokens", "budget/sft_steps", "budget/sft_tokens"])


def _results_table(data: dict[str, Any], compare_id: str) -> pa.Table:
    ks = pass_ks(data["per_run"])
    present = {n for v in data["per_run"].values() for n in v}
    extra = [c for c in EXTRA_COLUMNS if c in present] + sorted(n for n in present if n.startswith("hard/pass@"))
    extra += sorted(n for n in present if n.startswith("actor/prefix_abs_log_ratio/"))
    columns = result_columns(ks, test_ks(data["per_run"], ks), extra)
    rows = []
    for m in data["members"]:
        vals = data["per_run"].get(m["run_id"], {})
        row = {"compare_id": m.get("compare_id", compare_id), "run_id": m["run_id"], "method": m["method"],
               "variant": m.get("variant", m["method"]), "seed": int(m.get("seed", 0)),
               "sweep": json.dumps(m.get("sweep") or {}, sort_keys=True)}
        row.update({c: vals.get(c) for c in columns})
        rows.append(row)
    schema = pa.schema([("compare_id", pa.string()), ("run_id", pa.string()), ("method", pa.string()),
                        ("variant", pa.string()), ("seed", pa.int64()), ("sweep", pa.string())]
                       + [(c, pa.float64()) for c in columns])
    return pa.Table.from_pylist(rows, schema=schema)


def _shared(cfg: dict[str, Any]) -> str:
    r, e = cfg.get("rollout", {}), cfg.get("eval", {})
    d, mdl = cfg.get("data", {}), cfg.get("model", {})
    return (f"model `{mdl.get('path')}`, task `{d.get('source')}`, {cfg.get('iterations')} iterations × "
            f"{r.get('prompts_per_iteration')} prompts × {r.get('group_size')} samples per prompt "
            f"(max {r.get('max_new_tokens')} new tokens, T={r.get('temperature')}); evaluation every "
            f"{e.get('every')} iterations on {e.get('prompts')} `{e.get('split')}` prompts × {e.get('samples')} "
            f"samples at T={e.get('temperature')}")


def write_compare_report(compare_id: str, runs_dir: Path, out_dir: Path, command: str | None = None,
                         last: int = 10, reference: str | None = None) -> Path:
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
    results = _results_table(data, compare_id)
    write_table_atomic(results, out / "results.parquet")
    ks = pass_ks(per_run)
    plots = _plots(out, data, variants, ks)

    md = [f"# Comparison: {compare_id}", ""]
    if command:
        md += ["Produced by:", "", "```", command, "```", ""]
    seeds = sorted({m.get("seed") for m in data["members"]})
    rl = [m for m in data["members"] if m["method"] != CONTROL_METHOD]
    ref_cfg = data["configs"].get(rl[0]["run_id"]) if rl else None
    md.append(f"Generated {datetime.now(timezone.utc).isoformat(timespec='seconds')} from `{runs_dir.resolve()}`: "
              + (f"{len(data['members'])} runs" if done == len(data["members"]) else
                 f"{done} of the {len(data['members'])} planned runs have results so far (the comparison is incomplete)")
              + f", {len(variants)} variants, seeds {', '.join(map(str, seeds))}. "
              "Cells are mean ± std over seeds (sample std; a single seed shows its value).")
    md.append("")
    if claims:
        md += [claims, ""]
    if ref_cfg:
        md.append(f"Shared budget of every run (checked when the comparison was planned): {_shared(ref_cfg)}.")
        md.append("")
    ctl = [m for m in data["members"] if m["method"] == CONTROL_METHOD]
    if ctl:
        states = [json.loads((runs_dir / m["run_id"] / "control.json").read_text())
                  for m in ctl if (runs_dir / m["run_id"] / "control.json").is_file()]
        if states:
            b = statistics.fmean(s.get("budget_seconds", float("nan")) for s in states)
            st = statistics.fmean(s.get("steps", 0) for s in states)
            md.append(f"`{CONTROL_METHOD}`: the supervised warm-up continued from the same base model for the mean "
                      f"training time of the RL runs ({b:.1f} s; {st:.0f} SFT steps on average), evaluated exactly "
                      "like them. Its x axis is compute: step k = k/iterations of that time.")
            md.append("")

    if any("test/accuracy" in v for v in per_run.values()):
        n_test = next((int(v["test/prompts"]) for v in per_run.values() if "test/prompts" in v), 0)
        tks = test_ks(per_run, ks)
        n_samples = max(tks)
        md += [f"## Final test accuracy: every final policy on all {n_test} test prompts", "",
               f"The headline numbers: each run's final policy sampled {n_samples} times (T=1) on the whole test split, "
               "which no setting was chosen on (`thinking_seeds.pipeline.checkpoint_eval`). θ_0 is the base model every run "
               "starts from.", ""]
        div = "test/distinct_patterns" if any("test/distinct_patterns" in v for v in per_run.values()) else "test/strategy_b"
        cols = (["variant", "seeds", "accuracy (pass@1)"] + [f"pass@{k}" for k in tks[1:]]
                + ["distinct patterns / prompt" if div == "test/distinct_patterns" else "strategy b"])
        rows = []
        if data["base_test"]:
            b = data["base_test"]
            rows.append(["θ_0 (base model)", "—", format_cell(b.get("test/accuracy"))]
                        + [format_cell(b.get(f"test/pass@{k}")) for k in tks[1:]] + [format_cell(b.get(div))])
        rows += [[v, str(n_done(runs)), _cell(vals(runs, "test/accuracy"))] + [_cell(vals(runs, f"test/pass@{k}")) for k in tks[1:]]
                 + [_cell(vals(runs, div))] for v, runs in variants.items()]
        md.append(_md_table(cols, rows))
    base_variant = _baseline(data, variants)
    if base_variant:
        names = [n for n in ("test/accuracy", f"test/pass@{max(test_ks(per_run, ks))}", "hard/ever_solved",
                             "test/distinct_patterns", "eval/accuracy", "test/strategy_b", "eval/strategy_b")
                 if any(n in per_run.get(r, {}) for r in variants[base_variant])]
        diffs = paired_differences(data, variants, base_variant, names)
        md += [f"## Paired differences against `{base_variant}` (same seed)", "",
               "Each cell: mean ± std over seeds of (variant − baseline) at the same seed, [the 95% t-interval of "
               "the mean] with two or more seeds, then the per-seed differences. Same seed = same training prompts "
               "per iteration and the same evaluation prompts and sampling seed.", ""]
        label = {"test/accuracy": "test accuracy", "eval/accuracy": "validation accuracy",
                 "test/strategy_b": "test strategy b", "eval/strategy_b": "validation strategy b",
                 "hard/ever_solved": "hard prompts solved at least once", "test/distinct_patterns":
                 "test distinct patterns / prompt"}
        label.update({n: f"test {n[5:]}" for n in names if n.startswith("test/pass@")})
        rows = []
        for v, per_name in diffs.items():
            cells = []
            for n in names:
                d = per_name.get(n, [])
                ci = mean_ci([x for _, x in d])
                cells.append(("{:+.4f}".format(statistics.fmean(x for _, x in d))
                              + (f" ± {statistics.stdev([x for _, x in d]):.4f} [{ci[1]:+.4f}, {ci[2]:+.4f}]"
                                 if len(d) > 1 else "")
                              + " (" + ", ".join(f"s{sd}: {x:+.3f}" for sd, x in d) + ")") if d else "—")
            rows.append([v] + cells)
        md.append(_md_table(["variant"] + [label[n] for n in names], rows))
    md += ["## Final in-training evaluation (validation)", ""]
    cols = ["variant", "seeds", "final step", "accuracy", "strategy b", "seeded accuracy", "distinct correct / prompt"]
    rows = [[v, str(n_done(runs)), _cell(vals(runs, "final_step"), 0, count=True), _cell(vals(runs, "eval/accuracy")),
             _cell(vals(runs, "eval/strategy_b")), _cell(vals(runs, "eval_seeded/accuracy")),
             _cell(vals(runs, "eval/distinct_correct_solutions"), 2)] for v, runs in variants.items()]
    md.append(_md_table(cols, rows))
    for prefix, title in (("eval", "pass@k, plain sampling"),
                          ("eval_seeded", "pass@k, seeded sampling (historical prefix + current continuation): the explorable solution space")):
        md += [f"## {title}", ""]
        rows = [[v] + [_cell(vals(runs, f"{prefix}/pass@{k}")) for k in ks] for v, runs in variants.items()]
        md.append(_md_table(["variant"] + [f"pass@{k}" for k in ks], rows))
    md += [f"## Entropy and clipping by population (means over the first and the last {last} iterations)", "",
           "Entropy of the policy being trained on each population's tokens (per-iteration values are noisy: "
           "the plots show a moving average). Clip fractions are over the last iterations.", ""]
    rows = []
    for v, runs in variants.items():
        for pop in POPULATIONS:
            cells = [_cell(vals(runs, f"{when}actor/{a}/{pop}")) for a in ACTOR[:2] for when in ("first/", "")]
            cells += [_cell(vals(runs, f"actor/{a}/{pop}")) for a in ACTOR[2:]]
            if any(c != "—" for c in cells):
                rows.append([v, pop] + cells)
    md.append(_md_table(["variant", "population", f"entropy, first {last}", f"entropy, last {last}",
                         f"effective entropy, first {last}", f"effective entropy, last {last}", "clip fraction",
                         "clip fraction (|A|-weighted)"], rows))
    md += ["## Budget", "",
           "Generated tokens are summed over the whole run: the continuation stage (on-policy samples and the "
           "continuations of seeds) and the historical drafts the seeds were cut from. Train seconds sum the "
           "stages' `time/*` metrics (evaluation excluded); the SFT control trains for their mean.", ""]
    rows = [[v, _cell(vals(runs, "budget/iterations_done"), 0, count=True), _cell(vals(runs, "budget/train_seconds"), 1),
             _cell(vals(runs, "budget/generated_tokens"), 0), _cell(vals(runs, "budget/seed_draft_tokens"), 0),
             _cell(vals(runs, "budget/total_generated_tokens"), 0), _cell(vals(runs, "budget/sft_tokens"), 0)]
            for v, runs in variants.items()]
    md.append(_md_table(["variant", "iterations", "train seconds", "generated tokens (continuation)",
                         "seed draft tokens", "total generated", "SFT tokens"], rows))
    md += ["## Curves", ""]
    for stem, path in plots.items():
        if path is None and (stem == "distinct_patterns" or (stem == "strategy_b" and plots.get("distinct_patterns"))):
            continue  # each task has one of the two diversity curves (chain_sum: strategy b; countdown: patterns)
        md += [f"### {PLOTS[stem]}", "", f"![{PLOTS[stem]}]({stem}.png)" if path is not None else "_no data yet_", ""]
    md += ["## Runs", "", "Every run's final numbers (also in `results.parquet`).", ""]
    rows = []
    for m in data["members"]:
        v = per_run.get(m["run_id"], {})
        rows.append([m["run_id"], m.get("variant", m["method"]), str(m.get("seed")),
                     format_cell(int(v["final_step"])) if "final_step" in v else "—"]
                    + [format_cell(v.get(n)) for n in ("eval/accuracy", "eval/pass@1", f"eval/pass@{ks[-1]}",
                                                       f"eval_seeded/pass@{ks[-1]}", "eval/strategy_b",
                                                       "actor/entropy/all", "budget/train_seconds")]
                    + [format_cell(int(v["budget/total_generated_tokens"])) if "budget/total_generated_tokens" in v else "—"]
                    + [format_cell(v.get("test/accuracy"))])
    md.append(_md_table(["run", "variant", "seed", "final step", "validation accuracy", "pass@1", f"pass@{ks[-1]}",
                         f"seeded pass@{ks[-1]}", "strategy b", "entropy (all)", "train seconds",
                         "generated tokens", "test accuracy"], rows))
    md.append(f"SQL over these runs: `ts sql \"SELECT * FROM metrics WHERE run_id LIKE '{compare_id}-%'\"`.")
    text = "\n".join(md).rstrip() + "\n"
    return _write_atomic(out / "report.md", lambda f: f.write(text), mode="w")
