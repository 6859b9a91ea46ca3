"""A run's report: `runs/<id>/reports/report.md` with PNG curves and the named queries' tables.

    write_report("my-run")  ->  runs/my-run/reports/report.md
                                runs/my-run/reports/{accuracy,entropy,effective_entropy,clip_fraction,
                                                     prefix_diversity}.png

Everything is read through `thinking_seeds.store.sql` (read-only DuckDB); every file is written atomically
(temp file in the same folder, then rename), the Markdown last, so a reader never sees a report
that points at a missing or half-written plot. Plots use matplotlib's Agg canvas directly (no
pyplot, no global backend switch). Never imports prefect.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.sql import NAMED_QUERIES, QueryError, QueryResult, connect, run_named

__all__ = ["PLOTS", "format_cell", "markdown_table", "write_report"]

POPULATIONS = ("on_policy", "continuation", "prefix", "all")
# file stem -> (title, y label)
PLOTS = {
    "accuracy": ("Held-out accuracy and pass@k", "accuracy / pass@k"),
    "entropy": ("Token entropy by population (actor/entropy)", "entropy (nats)"),
    "effective_entropy": ("Effective entropy: tokens that carry gradient (actor/effective_entropy)", "entropy (nats)"),
    "clip_fraction": ("Gradient lost to clipping (actor/pg_clipfrac)", "fraction of tokens clipped"),
    "prefix_diversity": (
        "Prefix diversity over the run: distinct / all character 3-grams of the prefixes",
        "distinct 3-gram ratio",
    ),
}
MAX_TABLE_ROWS = 200
# A named query over a long run's corpus takes minutes on a small machine (BENCHMARKS.md, "SQL over
# the prefix corpus"); `ts sql`'s 60 s default would stop it. The corpus-report deployment runs
# every 6 hours, so this is the bound on one query, well inside that.
QUERY_TIMEOUT_S = 1800.0
# settings worth seeing at the top of a report (dotted keys of config.yaml)
_HEADLINE_KEYS = (
    "algorithm",
    "iterations",
    "seed",
    "model.path",
    "rollout.prompts_per_iteration",
    "rollout.group_size",
    "rollout.seeds_per_group",
    "prefix.ratio_min",
    "prefix.ratio_max",
    "prefix.loss",
    "pool.size",
    "pool.pick",
    "pool.snapshot_every",
    "advantage.baseline",
    "update.lr",
    "eval.every",
    "eval.samples",
)


# ---------------------------------------------------------------------------------------------
# formatting
# ---------------------------------------------------------------------------------------------


def format_cell(v: Any) -> str:
    """One table cell: floats to 4 decimals, maps as `k: v`, times in ISO, None as an em dash."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4f}"
    if isinstance(v, dict):
        return ", ".join(f"{format_cell(k)}: {format_cell(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_cell(x) for x in v) + "]"
    if isinstance(v, datetime):
        return v.astimezone(UTC).isoformat(timespec="seconds")
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, Decimal) or (
        isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral)
    ):  # numpy floats too
        return format_cell(float(v))
    return str(v)


def markdown_table(res: QueryResult, max_rows: int = MAX_TABLE_ROWS) -> str:
    if not res.rows:
        return "_no data yet_\n"

    def cell(v: Any) -> str:
        return format_cell(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(res.columns) + " |", "|" + "|".join("---" for _ in res.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in res.rows[:max_rows]]
    out = "\n".join(lines) + "\n"
    if len(res.rows) > max_rows:
        out += f"\n_{len(res.rows) - max_rows} more rows: `ts sql --query ... --run-id ...` shows them all._\n"
    return out


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------


def _series_plot(
    path: Path,
    title: str,
    ylabel: str,
    series: dict[str, list[tuple[int, float]]],
    styles: dict[str, str] | None = None,
    unit_range: bool = False,
    fraction: bool = False,
) -> Path | None:
    """Lines of (iteration, value) per label; None (and no file) when there is nothing to draw. Lines
    that coincide are drawn once, labelled "a = b"; `unit_range` / `fraction`: the y axis starts at 0."""
    series = _merge_identical({k: sorted(v) for k, v in series.items() if v})
    if not series:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for label, pts in series.items():
        xs, ys = zip(*pts, strict=True)
        names = label.split(" = ")
        extra = {"color": "black"} if "all" in names else {}  # the population total stands out
        ax.plot(xs, ys, (styles or {}).get(names[0], "-"), marker="o", markersize=3, label=label, **extra)
    ax.set_title(title)
    ax.set_xlabel("iteration (policy step)")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if unit_range:
        ax.set_ylim(0.0, 1.02)
    elif fraction:  # a fraction is never negative: no axis below 0 (matplotlib pads all-zero data to ±0.04)
        top = max(y for pts in series.values() for _, y in pts)
        ax.set_ylim(0.0, top * 1.1 if top > 0 else 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return atomic_write(path, lambda f: fig.savefig(f, format="png"))


def _merge_identical(series: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """Series equal at every point (same iterations, values equal to float rounding) become one,
    labelled "a = b" (accuracy = pass@1; on_policy = all when a run has one population)."""
    out: list[tuple[list[str], list[tuple[int, float]]]] = []
    for label, pts in series.items():
        for names, seen in out:
            if [x for x, _ in seen] == [x for x, _ in pts] and all(
                math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for (_, a), (_, b) in zip(seen, pts, strict=True)
            ):
                names.append(label)
                break
        else:
            out.append(([label], pts))
    return {" = ".join(names): pts for names, pts in out}


def _diversity_plot(path: Path, history: QueryResult, diversity: QueryResult) -> Path | None:
    """Two panels: the distinct 3-gram ratio of each iteration's prefixes against iteration (points
    coloured by the iteration's mean seed checkpoint age), and the ratio over the whole run against
    source age. None (and no file) when the run has no prefixes with 3-grams."""
    its = [
        (r["iteration"], float(r["distinct_ratio"]), r["mean_source_age"])
        for r in history.to_dicts()
        if _finite(r["distinct_ratio"])
    ]
    ages: list[tuple[int, float, int]] = []  # (source age, ratio, prefixes); data-set guidance is -1
    for row in diversity.to_dicts():
        if row["breakdown"] == "source_age" and _finite(row["distinct_ratio"]):
            age = -1 if row["bucket"] == "dataset" else int(row["bucket"])
            ages.append((age, float(row["distinct_ratio"]), int(row["prefixes"])))
    if not its and not ages:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 4), dpi=100)
    FigureCanvasAgg(fig)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    if its:
        xs, ys, mean_age = zip(*sorted(its), strict=True)
        left.plot(xs, ys, "-", color="grey", alpha=0.5, linewidth=1)
        shade = [float(a) if _finite(a) else -1.0 for a in mean_age]
        dots = left.scatter(xs, ys, c=shade, cmap="viridis", s=12 if len(xs) < 200 else 4, zorder=3)
        fig.colorbar(dots, ax=left, label="mean source age of the seeds (-1: data set)")
    left.set_title("each iteration's prefixes", fontsize=10)
    left.set_xlabel("iteration")
    left.set_ylabel(PLOTS["prefix_diversity"][1])
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ages:
        xs, ys, ns = zip(*sorted(ages), strict=True)
        right.plot(xs, ys, "-", color="grey", alpha=0.5)
        top = max(ns)
        right.scatter(xs, ys, s=[8 + 40 * n / top for n in ns], color="tab:blue", zorder=3)
        if xs[0] < 0:
            right.annotate("data set", (xs[0], ys[0]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    right.set_title("the whole run, by source age (marker size: prefixes)", fontsize=10)
    right.set_xlabel("source age (iterations between the seed's checkpoint and the policy)")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(PLOTS["prefix_diversity"][0], fontsize=11)
    fig.tight_layout()
    return atomic_write(path, lambda f: fig.savefig(f, format="png"))


def _finite(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _plots(
    reports: Path, results: dict[str, QueryResult], populations: tuple[str, ...] = POPULATIONS, seeded: bool = True
) -> dict[str, Path | None]:
    """The PNGs of PLOTS (without prefix_diversity for a method without prefixes), each None where
    there is nothing to draw; populations: those the method has."""
    ea, cf = results["entropy_accuracy"], results["clip_fraction"]
    acc: dict[str, list[tuple[int, float]]] = {"accuracy": []}
    styles = {"accuracy": "-"}
    ent: dict[str, list[tuple[int, float]]] = {p: [] for p in populations}
    eff: dict[str, list[tuple[int, float]]] = {p: [] for p in populations}
    for row in ea.to_dicts():
        it = row["iteration"]
        if _finite(row["accuracy"]):
            acc["accuracy"].append((it, float(row["accuracy"])))
        for k, v in (row["pass_at_k"] or {}).items():
            if _finite(v):
                acc.setdefault(f"pass@{k}", []).append((it, float(v)))
                styles[f"pass@{k}"] = "--"
        for p in populations:
            if _finite(row[f"entropy_{p}"]):
                ent[p].append((it, float(row[f"entropy_{p}"])))
            if _finite(row[f"eff_entropy_{p}"]):
                eff[p].append((it, float(row[f"eff_entropy_{p}"])))
    # pass@k curves in increasing k after the accuracy line
    acc = {
        "accuracy": acc["accuracy"],
        **{k: acc[k] for k in sorted((k for k in acc if k != "accuracy"), key=lambda s: int(s[5:]))},
    }
    clip: dict[str, list[tuple[int, float]]] = {}
    for row in cf.to_dicts():
        if _finite(row["clipfrac"]) and row["population"] in populations:
            clip.setdefault(row["population"], []).append((row["iteration"], float(row["clipfrac"])))
    data = {
        "accuracy": (acc, styles),
        "entropy": (ent, None),
        "effective_entropy": (eff, None),
        "clip_fraction": (clip, None),
    }
    out: dict[str, Path | None] = {}
    for stem in PLOTS:
        path = reports / f"{stem}.png"
        if stem == "prefix_diversity":
            drawn = (
                _diversity_plot(path, results["prefix_diversity_history"], results["prefix_diversity"])
                if seeded
                else None
            )
            if seeded:
                out[stem] = drawn
        else:
            series, st = data[stem]
            title, ylabel = PLOTS[stem]
            out[stem] = drawn = _series_plot(
                path, title, ylabel, series, st, unit_range=stem == "accuracy", fraction=stem == "clip_fraction"
            )
        if drawn is None and path.exists():
            path.unlink()  # a stale plot from an earlier report must not be shown as current
    return out


# ---------------------------------------------------------------------------------------------
# what the method has
# ---------------------------------------------------------------------------------------------

UNSEEDED_POPULATIONS = ("on_policy", "all")


def _seeded(cfg: dict[str, Any]) -> bool:
    """Whether the run's method trains on prefixes (rollout.seeds_per_group > 0; GRPO: no). A run
    without a saved config shows everything."""
    spg = _dotted(cfg, "rollout.seeds_per_group")
    return spg is None or spg > 0


def _without_columns(res: QueryResult, drop: set[str]) -> QueryResult:
    keep = [i for i, c in enumerate(res.columns) if c not in drop]
    return QueryResult([res.columns[i] for i in keep], [tuple(r[i] for i in keep) for r in res.rows])


def _clip_rows(res: QueryResult, populations: tuple[str, ...]) -> tuple[QueryResult, list[str]]:
    """The clip_fraction rows of the method's populations that clipped at some iteration, and the
    populations left out because their clip fraction is 0 at every iteration (no ratio left the clip
    range: on-policy tokens of a single-step update have ratio 1 and cannot clip)."""
    if not res.rows:
        return res, []
    i_pop, i_clip = res.columns.index("population"), res.columns.index("clipfrac")
    present = [p for p in populations if any(r[i_pop] == p for r in res.rows)]
    never = [p for p in present if all(not r[i_clip] for r in res.rows if r[i_pop] == p)]
    rows = [r for r in res.rows if r[i_pop] in populations and r[i_pop] not in never]
    return QueryResult(res.columns, rows), never


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------


def _dotted(cfg: dict[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def write_report(
    run_id: str,
    runs_dir: Path | None = None,
    timings: dict[str, float] | None = None,
    failures: dict[str, str] | None = None,
) -> Path:
    """Write `reports/report.md` (+ PNG plots) for one run; return the Markdown's path.

    Raises DataError when the run does not exist. A run with no data yet still gets a report
    (tables say "no data yet", no plots). A named query that fails (out of DuckDB's memory, past
    QUERY_TIMEOUT_S) leaves a line saying why in place of its table and plot; the rest is written.
    `timings` / `failures`, when given, receive the seconds of each step (`connect`, each named
    query, `plots`) and {query: why} of the queries that failed, for the report flow's log.
    """
    run = RunDir.for_run(run_id, runs_dir)
    t = time.perf_counter()
    con = connect(run_id, runs_dir)
    steps = {"connect": time.perf_counter() - t}
    failed: dict[str, str] = {}
    try:
        results = {}
        for name in NAMED_QUERIES:
            t = time.perf_counter()
            try:
                results[name] = run_named(con, name, QUERY_TIMEOUT_S)
            except QueryError as e:  # out of memory, timed out: the rest of the report is still worth writing
                results[name], failed[name] = QueryResult([], []), str(e)
            steps[name] = time.perf_counter() - t
        cfg_rows = con.execute("SELECT config_json FROM configs").fetchall()
    finally:
        con.close()
    cfg = json.loads(cfg_rows[0][0]) if cfg_rows and cfg_rows[0][0] else {}
    # Leave out what the method does not have: a GRPO run has no prefix or continuation population,
    # no prefix corpus and no prefix settings.
    seeded = _seeded(cfg)
    populations = POPULATIONS if seeded else UNSEEDED_POPULATIONS
    absent = {f"{kind}_{p}" for kind in ("entropy", "eff_entropy") for p in POPULATIONS if p not in populations}
    results["entropy_accuracy"] = _without_columns(results["entropy_accuracy"], absent)
    results["clip_fraction"], never_clipped = _clip_rows(results["clip_fraction"], populations)
    reports = run.reports
    reports.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    plots = _plots(reports, results, populations, seeded)
    steps["plots"] = time.perf_counter() - t
    if timings is not None:
        timings.update(steps)
    if failures is not None:
        failures.update(failed)

    summary = results["runs"].to_dicts()
    s = summary[0] if summary else {}
    md = [f"# Report: {run_id}", ""]
    md.append(
        f"Generated {datetime.now(UTC).isoformat(timespec='seconds')} from `{run.root}`. "
        "Iteration k is policy step θ_k: update metrics of iteration k are measured on θ_k, "
        "evaluation metrics are labelled with the step they evaluate."
    )
    md.append("")
    if s:
        md.append(f"- iterations done: {s.get('iterations_done', 0)} of {format_cell(s.get('iterations'))}")
        md.append(
            f"- last evaluation: step {format_cell(s.get('last_eval_step'))}, "
            f"accuracy {format_cell(s.get('last_accuracy'))} "
            f"(best {format_cell(s.get('best_accuracy'))})"
        )
        corpus = f"prefix corpus: {s.get('prefixes', 0)} seeds; " if seeded else ""
        md.append(f"- {corpus}rollouts: {s.get('rollouts', 0)}; pool snapshots: {s.get('pool_checkpoints', 0)}")
    if cfg:
        keys = [k for k in _HEADLINE_KEYS if seeded or not k.startswith("prefix.")]
        md.append("- settings: " + ", ".join(f"`{k}={_dotted(cfg, k)}`" for k in keys if _dotted(cfg, k) is not None))
    if not seeded:
        md.append(
            "- an on-policy method (rollout.seeds_per_group=0): every sample is the policy's own, so the report "
            "has no prefix or continuation population and no prefix corpus"
        )
    clip_note = (
        f"Left out: {', '.join(never_clipped)}, whose clip fraction is 0 at every iteration (no importance ratio "
        "left the clip range; on-policy tokens of a single-step update have ratio 1 and cannot clip)."
        if never_clipped
        else ""
    )
    md.append("")
    md.append("## Curves")
    md.append("")
    for stem, path in plots.items():
        title = PLOTS[stem][0]
        md.append(f"### {title}")
        md.append("")
        note = clip_note if stem == "clip_fraction" else ""
        if path is not None or not note:  # all populations left out: the note says why there is no plot
            md.append(f"![{title}]({stem}.png)" if path is not None else "_no data yet_")
            md.append("")
        if note:
            md.append(note)
            md.append("")
        if stem == "prefix_diversity" and path is not None:
            md.append(
                f"The numbers: `ts sql --query prefix_diversity_history --run-id {run_id}` (by iteration) and "
                "the prefix_diversity table below (over the whole run). The ratio falls as a group grows (common "
                "3-grams repeat), so compare groups of similar size: the marker size shows it."
            )
            md.append("")
    md.append("## Tables")
    md.append("")
    tables = ("entropy_accuracy", "clip_fraction", "prefix_diversity", "seeded_solve_rate", "runs")
    for name in [t for t in tables if seeded or t not in ("prefix_diversity", "seeded_solve_rate")]:
        desc = NAMED_QUERIES[name][0]
        md.append(f"### {name}")
        md.append("")
        md.append(f"{desc} (`ts sql --query {name} --run-id {run_id}`)")
        md.append("")
        if name == "clip_fraction" and clip_note:
            md.append(clip_note)
            md.append("")
            if not results[name].rows and name not in failed:
                continue
        md.append(f"_the query failed: {failed[name]}_\n" if name in failed else markdown_table(results[name]))
    text = "\n".join(md).rstrip() + "\n"
    return atomic_write(reports / "report.md", text)
