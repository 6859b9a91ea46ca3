"""A run's report: `runs/<id>/reports/report.md` with PNG curves and the named queries' tables.

    write_report("my-run")  ->  runs/my-run/reports/report.md
                                runs/my-run/reports/{accuracy,entropy,effective_entropy,clip_fraction,
                                                     seeds_by_source,prefix_diversity}.png

Everything is read through `thinking_seeds.store.sql` (read-only DuckDB); every file is written atomically
(temp file in the same folder, then rename), the Markdown last, so a reader never sees a report
that points at a missing or half-written plot. Plots use matplotlib's Agg canvas directly (no
pyplot, no global backend switch; report_plots.py draws them). Never imports prefect.
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

from thinking_seeds.evals.report_plots import PLOTS, POPULATIONS, _merge_identical, _plots
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.sql import NAMED_QUERIES, QueryError, QueryResult, connect, query, run_named

__all__ = ["PLOTS", "_merge_identical", "format_cell", "markdown_table", "write_report"]

MAX_TABLE_ROWS = 200
# A named query over a long run's corpus takes minutes on a small machine (BENCHMARKS.md, "SQL over
# the prefix corpus"); `ts sql`'s 60 s default would stop it. The corpus-report deployment runs
# every 6 hours, so this is the bound on one query, well inside that.
QUERY_TIMEOUT_S = 1800.0
# Each iteration's seeds by the pool snapshot that wrote them (source_step = iteration − source_age),
# from the per-(iteration, source age) aggregates the seeds stage writes: ~1/20 of the corpus to read.
SEEDS_BY_SOURCE = """
SELECT iteration, iteration - source_age AS source_step, CAST(sum(prefixes) AS BIGINT) AS seeds
FROM prefix_groups WHERE source_age >= 0 GROUP BY ALL ORDER BY iteration, source_step
"""
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
    if isinstance(v, Decimal | numbers.Real) and not isinstance(v, numbers.Integral):  # numpy floats too
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


def _dotted(cfg: dict[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _sources_lines(results: dict[str, QueryResult], failed: dict[str, str]) -> list[str]:
    """Below the seeds-by-source plot: how many pool snapshots wrote seeds, at which source ages, and
    per snapshot its seeds and their continuations' solve rate (the seeded_solve_rate table's rows)."""
    if "seeds_by_source" in failed:
        return [f"_the query failed: {failed['seeds_by_source']}_", ""]
    rows = results["seeds_by_source"].to_dicts()
    if not rows:
        return []
    per_source: dict[int, int] = {}
    ages_of: dict[int, list[int]] = {}
    for r in rows:
        src = int(r["source_step"])
        per_source[src] = per_source.get(src, 0) + int(r["seeds"])
        ages_of.setdefault(src, []).append(int(r["iteration"]) - src)
    ages = sorted({int(r["iteration"]) - int(r["source_step"]) for r in rows})
    solve = {
        str(r["bucket"]): r
        for r in results["seeded_solve_rate"].to_dicts()
        if r.get("kind") == "seeded" and r.get("breakdown") == "source_step"
    }
    total = sum(per_source.values())
    md = [
        f"Seeds from {len(per_source)} source checkpoint(s) of the historical pool at source ages "
        f"{ages[0]}–{ages[-1]} iterations"
        + (" (a checkpoint writes its own iteration's seeds only while the pool is empty)" if 0 in ages else "")
        + ". Per checkpoint: its seeds and how often their continuations solved the task, next to the on-policy "
        "samples of the same iterations (`ts sql --query seeded_solve_rate`).",
        "",
        "| written by | at source ages | seeds | share | seeded solve rate | on-policy, same iterations |",
        "|---|---|---|---|---|---|",
    ]
    for src, n in sorted(per_source.items()):
        r = solve.get(str(src), {})
        lo, hi = min(ages_of[src]), max(ages_of[src])
        md.append(
            f"| θ_{src} | {lo}–{hi} | {n} | {n / total:.1%} | {format_cell(r.get('solve_rate'))} | "
            f"{format_cell(r.get('on_policy_solve_rate'))} |"
        )
    return md + [""]


def write_report(
    run_id: str,
    runs_dir: Path | None = None,
    timings: dict[str, float] | None = None,
    failures: dict[str, str] | None = None,
    tables: dict[str, list[dict[str, Any]]] | None = None,
) -> Path:
    """Write `reports/report.md` (+ PNG plots) for one run; return the Markdown's path.

    Raises DataError when the run does not exist. A run with no data yet still gets a report
    (tables say "no data yet", no plots). A named query that fails (out of DuckDB's memory, past
    QUERY_TIMEOUT_S) leaves a line saying why in place of its table and plot; the rest is written.
    `timings` / `failures`, when given, receive the seconds of each step (`connect`, each named
    query, `plots`) and {query: why} of the queries that failed, for the report flow's log; `tables`
    receives the rows of each table under "## Tables" (the report flow publishes them as artifacts).
    """
    run = RunDir.for_run(run_id, runs_dir)
    t = time.perf_counter()
    damaged: list[str] = []  # files the views left out: named in the report, not only on a console
    con = connect(run_id, runs_dir, damaged=damaged)
    steps = {"connect": time.perf_counter() - t}
    failed: dict[str, str] = {}
    runs = {name: lambda n=name: run_named(con, n, QUERY_TIMEOUT_S) for name in NAMED_QUERIES}
    runs["seeds_by_source"] = lambda: query(con, SEEDS_BY_SOURCE, QUERY_TIMEOUT_S)
    try:
        results = {}
        for name, run_query in runs.items():
            t = time.perf_counter()
            try:
                results[name] = run_query()
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
    md = [
        f"# Report: {run_id}",
        "",
        f"Generated {datetime.now(UTC).isoformat(timespec='seconds')} from `{run.root}`. "
        "Iteration k is policy step θ_k: update metrics of iteration k are measured on θ_k, "
        "evaluation metrics are labelled with the step they evaluate.",
        "",
    ]
    if damaged:  # the tables below are without these files
        md += [f"**Left out, damaged ({len(damaged)}; `ts check {run_id}` says what to redo):**", ""]
        md += [f"- {line}" for line in damaged] + [""]
    if s:
        md.append(f"- iterations done: {s.get('iterations_done', 0)} of {format_cell(s.get('iterations'))}")
        md.append(
            f"- last evaluation: step {format_cell(s.get('last_eval_step'))}, "
            f"accuracy {format_cell(s.get('last_accuracy'))} "
            f"(best {format_cell(s.get('best_accuracy'))})"
        )
        corpus = f"prefix corpus: {s.get('prefixes', 0)} seeds; " if seeded else ""
        sources = len({r["source_step"] for r in results["seeds_by_source"].to_dicts()})
        written = f" (seeds written by {sources} of them)" if seeded and sources else ""
        md.append(
            f"- {corpus}rollouts: {s.get('rollouts', 0)}; pool snapshots: {s.get('pool_checkpoints', 0)}{written}"
        )
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
    md += ["", "## Curves", ""]
    for stem, path in plots.items():
        title = PLOTS[stem][0]
        md += [f"### {title}", ""]
        note = clip_note if stem == "clip_fraction" else ""
        if path is not None or not note:  # all populations left out: the note says why there is no plot
            md += [f"![{title}]({stem}.png)" if path is not None else "_no data yet_", ""]
        if note:
            md += [note, ""]
        if stem == "seeds_by_source":
            md += _sources_lines(results, failed)
        if stem == "prefix_diversity" and path is not None:
            md += [
                f"The numbers: `ts sql --query prefix_diversity_history --run-id {run_id}` (by iteration) and "
                "the prefix_diversity table below (over the whole run). The ratio falls as a group grows (common "
                "3-grams repeat), so compare groups of similar size: the marker size shows it.",
                "",
            ]
    md += ["## Tables", ""]
    table_names = ("entropy_accuracy", "clip_fraction", "prefix_diversity", "seeded_solve_rate", "runs")
    for name in [t for t in table_names if seeded or t not in ("prefix_diversity", "seeded_solve_rate")]:
        md += [f"### {name}", "", f"{NAMED_QUERIES[name][0]} (`ts sql --query {name} --run-id {run_id}`)", ""]
        if name == "clip_fraction" and clip_note:
            md += [clip_note, ""]
            if not results[name].rows and name not in failed:
                continue
        md.append(f"_the query failed: {failed[name]}_\n" if name in failed else markdown_table(results[name]))
        if tables is not None and name not in failed:
            tables[name] = results[name].to_dicts()
    text = "\n".join(md).rstrip() + "\n"
    return atomic_write(reports / "report.md", text)
