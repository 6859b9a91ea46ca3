"""The numbers of a comparison report, read with DuckDB: markers, per-run finals, curves, configs.

    data = collect("cmp", Path("runs"))       # {"members", "per_run", "curves", "configs", "base_test"}
    data["per_run"]["cmp-grpo-s0"]["eval/accuracy"]      # final in-training evaluation
    data["per_run"]["cmp-grpo-s0"]["test/pass@64"]       # final test on the whole test split
    data["per_run"]["cmp-grpo-s0"]["equal/test/pass@64"] # ... of θ_equal_step, the others' iteration count
    results_table(data, "cmp")                           # results.parquet: one row per run

The runs are found by their `compare.json` markers (written by `thinking_seeds.experiments.compare.run_all`
and the SFT control) and read through `thinking_seeds.store.sql` (read-only DuckDB over every run
directory under runs_dir, restored archive copies included). Per run, "final" means the last
evaluated policy step; entropy, effective entropy and clip fractions are the mean over the last
`last` update iterations; the budget columns are sums over the whole run (generated tokens of the
continuation stage, tokens of the historical drafts that seeds were cut from, training seconds from
the `time/*` stage metrics, evaluation excluded). Never imports prefect.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from thinking_seeds.algo.population_names import REPORTED_POPULATIONS
from thinking_seeds.config import ALGORITHMS
from thinking_seeds.experiments.members import compare_members, reference_members
from thinking_seeds.experiments.run_spec import CONTROL_METHOD, spec_of, training_seconds_sql
from thinking_seeds.experiments.spec import DEFAULT_METHODS
from thinking_seeds.pipeline.checkpoint_eval import EQUAL_ITERATIONS_STAGE, FINAL_TEST_STAGE
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.sql import connect, query
from thinking_seeds.store.sql_files import literals

__all__ = [
    "ACTOR",
    "EQUAL",
    "EXTRA_COLUMNS",
    "PASS_KS",
    "POPULATIONS",
    "collect",
    "ks_of",
    "largest_k",
    "mean_std",
    "pass_ks",
    "result_columns",
    "results_table",
    "test_ks",
]

POPULATIONS = REPORTED_POPULATIONS  # the loss's populations and "all" (algo/population_names.py)
PASS_KS = (1, 2, 4, 8, 16)
ACTOR = ("entropy", "effective_entropy", "pg_clipfrac", "pg_clipfrac_adv")
AGE = ("prefix_abs_log_ratio",)
# Prefix of a run's values at equal iterations: a run given more iterations than the others (compute
# matched by iterations) is also read at their count, θ_step (`equal_step`), when that checkpoint's
# test exists (equal_iterations.py): its test metrics there, its in-training evaluation at that step,
# and its per-iteration actor metrics over the `last` iterations before it (as the final reading takes
# the last iterations before the end).
EQUAL = "equal/"  # by seed source age (thinking_seeds.train.trainer): how off-policy the seeds are


def _sql_list(ids: Sequence[str]) -> str:
    return literals(ids)


def _finite(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _order(marker: dict[str, Any]) -> tuple:
    """Report order: the headline methods in their order, other methods, the SFT control last;
    within a method the reference base point first, then variants, then seeds."""
    m = marker["method"]
    rank = (
        DEFAULT_METHODS.index(m)
        if m in DEFAULT_METHODS
        else len(DEFAULT_METHODS) + ALGORITHMS.index(m)
        if m in ALGORITHMS
        else 99
    )
    return (m == CONTROL_METHOD, rank, "reference" not in marker, marker.get("variant", m), marker.get("seed", 0))


def collect(compare_id: str, runs_dir: Path, last: int = 10, reference: str | None = None) -> dict[str, Any]:
    """Everything the report shows, read with DuckDB: markers, per-run finals, series, configs.

    With `reference`, the unswept runs of that comparison with the same methods and seeds join
    the report as the ablation's base point (`thinking_seeds.experiments.members.reference_members`).
    """
    members = compare_members(compare_id, runs_dir)
    if not members:
        raise DataError(
            f"no runs of comparison {compare_id!r} under {runs_dir} (no run directory has a compare.json "
            f"with that id); run `ts compare --id {compare_id} ...` first"
        )
    if reference:
        rl = [spec_of(m) for m in members if m["method"] != CONTROL_METHOD]
        members += reference_members(reference, rl, runs_dir)
    members = sorted(members, key=_order)
    ids = _sql_list([m["run_id"] for m in members])
    actor_or_age = " OR ".join(f"starts_with(name, 'actor/{a}/')" for a in ACTOR + AGE)
    con = connect(runs_dir=runs_dir)
    try:
        # The comparison's metrics are read from their files once, into memory (~10k rows a run): the
        # queries below name them a dozen times, and a scan of the file dataset per mention ran out of
        # DuckDB's 2 GB on game24-main's 38 full-length runs (one small file per stage and iteration).
        own = f"SELECT run_id, iteration, stage, name, value FROM metrics WHERE run_id IN ({ids})"
        con.register("cmp_metrics", con.sql(own).to_arrow_table().combine_chunks())
        finals = query(
            con,
            f"""
            WITH m AS (SELECT * FROM cmp_metrics),
            ev AS (SELECT run_id, iteration, name, value FROM m WHERE stage = 'evaluate'),
            fin AS (SELECT run_id, max(iteration) AS final_step FROM ev WHERE name = 'eval/accuracy' GROUP BY run_id),
            act AS (SELECT run_id, iteration, name, value FROM m
                    WHERE stage = 'update' AND ({actor_or_age})),
            actlast AS (SELECT run_id, max(iteration) AS last_it FROM act GROUP BY run_id),
            eq AS (SELECT run_id, max(iteration) AS it FROM m WHERE stage = '{EQUAL_ITERATIONS_STAGE}' GROUP BY run_id)
            SELECT ev.run_id, ev.name, ev.value FROM ev
                   JOIN fin ON ev.run_id = fin.run_id AND ev.iteration = fin.final_step
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
            UNION ALL SELECT run_id, 'budget/train_seconds', seconds FROM ({training_seconds_sql("m")})
            UNION ALL SELECT run_id, 'budget/sft_tokens', max(value) FROM m WHERE name = 'sft/tokens' GROUP BY run_id
            UNION ALL SELECT run_id, 'budget/sft_steps', max(value) FROM m WHERE name = 'sft/steps' GROUP BY run_id
            UNION ALL SELECT m.run_id, 'test/' || substr(m.name, 6), m.value FROM m
                      JOIN (SELECT run_id, max(iteration) AS it FROM m
                            WHERE stage = '{FINAL_TEST_STAGE}' GROUP BY run_id) ft
                      ON m.run_id = ft.run_id AND m.iteration = ft.it
                      WHERE m.stage = '{FINAL_TEST_STAGE}' AND starts_with(m.name, 'eval/')
            UNION ALL SELECT run_id, 'equal_step', it FROM eq
            UNION ALL SELECT m.run_id, '{EQUAL}test/' || substr(m.name, 6), m.value FROM m
                      JOIN eq ON m.run_id = eq.run_id AND m.iteration = eq.it
                      WHERE m.stage = '{EQUAL_ITERATIONS_STAGE}' AND starts_with(m.name, 'eval/')
            UNION ALL SELECT ev.run_id, '{EQUAL}' || ev.name, ev.value FROM ev
                      JOIN eq ON ev.run_id = eq.run_id AND ev.iteration = eq.it
            UNION ALL SELECT act.run_id, '{EQUAL}' || act.name, avg(act.value) FILTER (WHERE NOT isnan(act.value))
                      FROM act JOIN eq ON act.run_id = eq.run_id
                      WHERE act.iteration >= eq.it - {int(last)} AND act.iteration < eq.it
                      GROUP BY act.run_id, act.name
        """,
        )
        base = query(
            con,
            f"""
            SELECT substr(name, 6), avg(value) FROM cmp_metrics
            WHERE stage = '{FINAL_TEST_STAGE}' AND iteration = 0 AND starts_with(name, 'eval/')
            GROUP BY name""",
        )
        series = query(
            con,
            f"""
            SELECT run_id, stage, iteration, name, value FROM cmp_metrics
            WHERE (
                (stage = 'evaluate' AND (name IN ('eval/accuracy', 'eval/strategy_b', 'eval/distinct_patterns',
                                                 'eval/distinct_correct_solutions') OR starts_with(name, 'eval/pass@')))
                OR (stage = 'update' AND ({" OR ".join(f"starts_with(name, 'actor/{a}/')" for a in ACTOR[:3])})))
            ORDER BY run_id, iteration
        """,
        )
        configs = query(con, f"SELECT run_id, config_json FROM configs WHERE run_id IN ({ids})")
    finally:
        con.close()
    per_run: dict[str, dict[str, float]] = defaultdict(dict)
    for run_id, name, value in finals.rows:
        if value is not None:
            per_run[run_id][name] = float(value)
    for v in per_run.values():
        if "budget/generated_tokens" in v or "budget/seed_draft_tokens" in v:
            v["budget/total_generated_tokens"] = v.get("budget/generated_tokens", 0.0) + v.get(
                "budget/seed_draft_tokens", 0.0
            )
    curves: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for run_id, _stage, it, name, value in series.rows:
        if _finite(value):
            curves[run_id][name].append((int(it), float(value)))
    cfgs = {r: json.loads(c) for r, c in configs.rows if c}
    return {
        "members": members,
        "per_run": per_run,
        "curves": curves,
        "configs": cfgs,
        "base_test": {f"test/{n}": float(v) for n, v in base.rows if v is not None},
    }


def mean_std(values: list[float]) -> tuple[float, float, int] | None:
    """(mean, sample std, n) of the finite values (std 0 for one); None when there is none."""
    vs = [v for v in values if _finite(v)]
    if not vs:
        return None
    return statistics.fmean(vs), (statistics.stdev(vs) if len(vs) > 1 else 0.0), len(vs)


def ks_of(by_run: dict[str, dict[str, Any]], prefix: str | tuple[str, ...]) -> list[int]:
    """The k of every `<prefix>k` metric (e.g. "test/pass@") of any run (per_run or curves), sorted."""
    return sorted({int(n.rsplit("@", 1)[1]) for v in by_run.values() for n in v if n.startswith(prefix)})


def largest_k(by_run: dict[str, dict[str, Any]], prefix: str) -> int | None:
    return max(ks_of(by_run, prefix), default=None)


def pass_ks(per_run: dict[str, dict[str, float]]) -> list[int]:
    """The k of every eval/pass@k present (PASS_KS when there is none yet)."""
    return ks_of(per_run, ("eval/pass@", "eval_seeded/pass@")) or list(PASS_KS)


def test_ks(per_run: dict[str, dict[str, float]], ks: Sequence[int]) -> list[int]:
    """The k of the final test's pass@k (it may sample more than the in-training evaluation)."""
    return ks_of(per_run, "test/pass@") or list(ks)


# Columns that only a task with solution labels (countdown) and a θ_0 per-prompt file produce.
EXTRA_COLUMNS = (
    "test/distinct_patterns",
    "test/pattern_entropy",
    "eval/distinct_patterns",
    "eval/pattern_entropy",
    "hard/accuracy",
    "hard/ever_solved",
    "hard/distinct_patterns",
)


def result_columns(ks: Sequence[int], tks: Sequence[int] | None = None, extra: Sequence[str] = ()) -> list[str]:
    """The metric columns of results.parquet, in order."""
    return (
        ["test/accuracy"]
        + [f"test/pass@{k}" for k in (tks or ks)]
        + list(extra)
        + [
            "test/strategy_b",
            "test/prompts",
            "final_step",
            "eval/accuracy",
            "eval/strategy_a",
            "eval/strategy_b",
            "eval/strategy_other",
            "eval/distinct_correct_solutions",
            "eval/mean_response_len",
        ]
        + [f"eval/pass@{k}" for k in ks]
        + ["eval_seeded/accuracy", "eval_seeded/strategy_b", "eval_seeded/distinct_correct_solutions"]
        + [f"eval_seeded/pass@{k}" for k in ks]
        + [f"actor/{a}/{p}" for a in ACTOR for p in POPULATIONS]
        + [
            "budget/iterations_done",
            "budget/train_seconds",
            "budget/generated_tokens",
            "budget/seed_draft_tokens",
            "budget/total_generated_tokens",
            "budget/sft_steps",
            "budget/sft_tokens",
        ]
    )


def results_table(data: dict[str, Any], compare_id: str) -> pa.Table:
    """results.parquet: one row per member run, its ids and sweep point, then `result_columns`
    (the k and the extra columns that this comparison's runs have)."""
    ks = pass_ks(data["per_run"])
    present = {n for v in data["per_run"].values() for n in v}
    extra = [c for c in EXTRA_COLUMNS if c in present] + sorted(n for n in present if n.startswith("hard/pass@"))
    extra += sorted(n for n in present if n.startswith("actor/prefix_abs_log_ratio/"))
    columns = result_columns(ks, test_ks(data["per_run"], ks), extra)
    rows = []
    for m in data["members"]:
        vals = data["per_run"].get(m["run_id"], {})
        row = {
            "compare_id": m.get("compare_id", compare_id),
            "run_id": m["run_id"],
            "method": m["method"],
            "variant": m.get("variant", m["method"]),
            "seed": int(m.get("seed", 0)),
            "sweep": json.dumps(m.get("sweep") or {}, sort_keys=True),
        }
        row.update({c: vals.get(c) for c in columns})
        rows.append(row)
    schema = pa.schema(
        [
            ("compare_id", pa.string()),
            ("run_id", pa.string()),
            ("method", pa.string()),
            ("variant", pa.string()),
            ("seed", pa.int64()),
            ("sweep", pa.string()),
        ]
        + [(c, pa.float64()) for c in columns]
    )
    return pa.Table.from_pylist(rows, schema=schema)
