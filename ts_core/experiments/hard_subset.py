"""The hard subset of a comparison's test split: the prompts θ_0 rarely solves, fixed before any RL.

    hard, k = add_hard_subset(data, runs_dir)      # ids of the hard prompts, samples per prompt
    data["per_run"]["cmp-grpo-s0"]["hard/ever_solved"]   # share of them solved at least once

The subset is a function of θ_0's evaluation alone: the test prompts whose success rate in θ_0's
final-test file (`evals/final-test/step_000000.parquet`, every test prompt sampled
eval.test_samples times) is below HARD_THRESHOLD. No trained policy takes part in choosing it, so
it cannot favour a method, and it is the same for every run of the comparison.

The threshold is 25%: the earlier < 10% subset held one prompt on the plateau base
(docs/results/countdown-plateau), too few to measure anything on; < 25% holds 29 there.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thinking_seeds.algo.metrics import pass_at_k
from thinking_seeds.pipeline.checkpoint_eval import EQUAL_ITERATIONS_STAGE

__all__ = ["HARD_THRESHOLD", "add_hard_subset", "base_per_prompt", "hard_prompts", "hard_subset_stats", "per_prompt"]

HARD_THRESHOLD = 0.25


def _plain_rows(path: Path) -> dict[str, dict[str, Any]]:
    """{prompt_id: row} of a per-prompt evaluation file, plain sampling only."""
    import pyarrow.parquet as pq

    return {r["prompt_id"]: r for r in pq.read_table(path).to_pylist() if r["mode"] == "plain"}


def per_prompt(run_root: Path, stage: str = "final-test") -> dict[str, dict[str, Any]] | None:
    """{prompt_id: row} of the run's latest per-prompt evaluation file of `stage` (plain sampling)."""
    files = sorted((run_root / "evals" / stage).glob("step_*.parquet"))
    return _plain_rows(files[-1]) if files else None


def base_per_prompt(runs_dir: Path, run_ids: Sequence[str]) -> dict[str, dict[str, Any]] | None:
    """θ_0's per-prompt final-test rows (the first run that has them: every run starts from θ_0)."""
    files = [runs_dir / rid / "evals" / "final-test" / "step_000000.parquet" for rid in run_ids]
    return next((_plain_rows(f) for f in files if f.exists()), None)


def hard_prompts(base: dict[str, dict[str, Any]], threshold: float = HARD_THRESHOLD) -> list[str]:
    """The prompt ids θ_0 solves in fewer than `threshold` of its samples (from θ_0's rows only)."""
    return sorted(p for p, r in base.items() if r["n"] and r["correct"] / r["n"] < threshold)


def hard_subset_stats(
    rows: dict[str, dict[str, Any]], hard: Sequence[str], k: int, key: str = "hard"
) -> dict[str, float]:
    """On the hard prompts: accuracy, pass@k (unbiased), share solved at least once, distinct patterns."""
    got = [rows[p] for p in hard if p in rows]
    if not got:
        return {}
    return {
        f"{key}/accuracy": statistics.fmean(r["correct"] / r["n"] for r in got),
        f"{key}/pass@{k}": statistics.fmean(pass_at_k(r["n"], r["correct"], min(k, r["n"])) for r in got),
        f"{key}/ever_solved": statistics.fmean(1.0 if r["correct"] > 0 else 0.0 for r in got),
        f"{key}/distinct_patterns": statistics.fmean(float(r.get("distinct_labels") or 0) for r in got),
    }


def add_hard_subset(
    data: dict[str, Any], runs_dir: Path, threshold: float = HARD_THRESHOLD, key: str = "hard"
) -> tuple[list[str], int] | None:
    """Compute <key>/* over the hard prompts (`hard_prompts` of θ_0's final test) for every run (into
    data['per_run']) and θ_0 (data['base_test']); returns (hard prompt ids, k) or None when θ_0 has
    no per-prompt final-test file."""
    ids = [m["run_id"] for m in data["members"]]
    base = base_per_prompt(runs_dir, ids)
    if not base:
        return None
    hard = hard_prompts(base, threshold)
    k = max(r["n"] for r in base.values())
    data["base_test"].update(hard_subset_stats(base, hard, k, key))
    for rid in ids:
        rows = per_prompt(runs_dir / rid)
        if rows:
            data["per_run"].setdefault(rid, {}).update(hard_subset_stats(rows, hard, k, key))
        # θ_step of a run given more iterations, tested at the others' count (equal_iterations.py)
        rows = per_prompt(runs_dir / rid, EQUAL_ITERATIONS_STAGE)
        if rows:
            data["per_run"].setdefault(rid, {}).update(hard_subset_stats(rows, hard, k, f"equal/{key}"))
    return hard, k
