"""Symmetric selection on validation: every method gets its setting from the same grid, the same way.

    ts compare ... --select lr=1e-4,3e-4,1e-3 --select-seeds 0-2 --select-on validation

    specs = selection_specs(spec)                  # method x grid value x seed, id <id>-select-...
    jobs = validation_jobs(specs, runs_dir)        # each final policy on the whole validation split
    table = selection_table(specs, runs_dir)       # {method: {value: {seed: validation pass@1}}}
    chosen = choose(table)                         # {method: best value}
    spec = with_selection(spec, chosen)            # the confirmatory runs' method_overrides

Why: a budget tuned on GRPO pilots favours GRPO, and one read on the test split spends the test
split. Here every compared method (GRPO and each Thinking Seeds arm alike) trains the whole grid on
`select_seeds`, on the comparison's shared budget, and each final policy is evaluated on every
validation prompt (data.val_size >= MIN_PROMPTS) with max(MIN_SAMPLES, eval.samples) samples. The
test split is never read: the selection runs train without the final test, and their only extra
evaluation is `--split validation` (stage SELECT_STAGE).

The rule (choose): per method, the value whose mean validation pass@1 over the selection seeds is
highest; an exact tie goes to the value listed first in the grid. The grid, seeds, every per-seed
score and the choice go into the comparison's protocol (protocol.py) before its first confirmatory
run; the confirmatory runs (other seeds, or the same: they are the comparison's own runs) then
carry the chosen value as a method override. Nothing here starts a process (compare.py does).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError
from thinking_seeds.experiments.comparison_args import resolve_key
from thinking_seeds.experiments.jobs import Job, checkpoint_eval_cmd
from thinking_seeds.experiments.run_spec import RunSpec, plan
from thinking_seeds.experiments.spec import ComparisonSpec
from thinking_seeds.store.run_dir import RunDir

__all__ = [
    "MIN_PROMPTS",
    "MIN_SAMPLES",
    "SELECT_STAGE",
    "choose",
    "resolve_key",
    "selection_id",
    "selection_record",
    "selection_specs",
    "selection_table",
    "validation_jobs",
    "with_selection",
]

MIN_PROMPTS, MIN_SAMPLES = 128, 32
SELECT_STAGE = "select-validation"


def selection_id(compare_id: str) -> str:
    return f"{compare_id}-select"


def _own_overrides(spec: ComparisonSpec) -> dict[str, list[str]]:
    """The methods' own settings (--method-set) that the selection runs keep: all but an earlier choice of
    the selected key."""
    key = resolve_key(next(iter(spec.select)))
    return {m: [o for o in os if o.split("=", 1)[0].strip() != key] for m, os in spec.method_overrides.items()}


def selection_specs(spec: ComparisonSpec) -> list[RunSpec]:
    """The grid's runs: every method of `spec` (its own seed ranges ignored) x value x select seed."""
    ((key, grid),) = spec.select.items()
    methods = spec.select_methods or [m.split(":", 1)[0] for m in spec.methods]
    grid_sweep = {resolve_key(key): grid}
    overrides = [*spec.overrides, *spec.select_overrides]
    own = _own_overrides(spec)
    specs = plan(
        spec.preset, methods, spec.select_seeds, overrides, grid_sweep, selection_id(spec.compare_id), False, own
    )
    cfg = specs[0].config()
    if cfg.data.val_size < MIN_PROMPTS:
        raise ConfigError(
            f"--select: the validation split has {cfg.data.val_size} prompts; selecting on fewer than {MIN_PROMPTS} "
            f"reads noise: set data.val_size={MIN_PROMPTS} or more"
        )
    return specs


def _samples(cfg: Any) -> int:
    return max(MIN_SAMPLES, cfg.eval.samples)


def validation_jobs(specs: Sequence[RunSpec], runs_dir: Path) -> list[Job]:
    """One `python -m thinking_seeds.pipeline.checkpoint_eval` per selection run: its final policy on
    every validation prompt (never the test split); a job whose metrics file exists is done."""
    jobs = []
    for s in specs:
        cfg = s.config()
        run = RunDir.for_run(s.run_id, Path(runs_dir))
        cmd = checkpoint_eval_cmd(run.root, cfg.iterations, "validation", SELECT_STAGE, _samples(cfg))
        done = run.metrics(cfg.iterations, SELECT_STAGE).exists()
        jobs.append(Job(f"{s.run_id} validation", cmd, run.root / "select_eval.log", done=done, run_root=run.root))
    return jobs


def selection_table(specs: Sequence[RunSpec], runs_dir: Path) -> dict[str, dict[str, dict[int, float]]]:
    """{method: {grid value: {seed: validation pass@1 of the final policy}}} from the runs' metrics."""
    import pyarrow.parquet as pq

    out: dict[str, dict[str, dict[int, float]]] = {}
    for s in specs:
        ((_, value),) = s.sweep
        f = RunDir.for_run(s.run_id, Path(runs_dir)).metrics(s.config().iterations, SELECT_STAGE)
        if not f.exists():
            raise ConfigError(f"selection run {s.run_id} has no validation evaluation ({f}); rerun the same command")
        rows = {r["name"]: r["value"] for r in pq.read_table(f).to_pylist()}
        out.setdefault(s.method, {}).setdefault(value, {})[s.seed] = float(rows["eval/accuracy"])
    return out


def choose(table: dict[str, dict[str, dict[int, float]]], grid: Sequence[str] | None = None) -> dict[str, str]:
    """Per method, the grid value with the highest mean validation pass@1 over seeds; an exact tie
    goes to the value first in `grid` (default: the table's order). Every value must have the same
    seeds: a value missing a seed would be ranked on other noise."""
    chosen = {}
    for method, by_value in table.items():
        order = list(grid or by_value)
        seeds = {v: sorted(by_value.get(v, {})) for v in order}
        if len({tuple(x) for x in seeds.values()}) != 1 or not seeds[order[0]]:
            raise ConfigError(f"selection of {method}: the grid values ran different seeds {seeds}; rerun to finish")
        means = {v: statistics.fmean(by_value[v].values()) for v in order}
        if any(math.isnan(m) for m in means.values()):
            raise ConfigError(f"selection of {method}: a validation pass@1 is nan ({means})")
        chosen[method] = max(order, key=lambda v: (means[v], -order.index(v)))
    return chosen


def selection_record(
    spec: ComparisonSpec, table: dict[str, dict[str, dict[int, float]]], chosen: dict[str, str]
) -> dict[str, Any]:
    """What the protocol keeps of the selection: the grid, the rule, every score and the choice."""
    ((key, grid),) = spec.select.items()
    cfg = selection_specs(spec)[0].config()
    return {
        "key": resolve_key(key),
        "grid": list(grid),
        "seeds": list(spec.select_seeds),
        "split": "validation",
        "prompts": cfg.data.val_size,
        "samples": _samples(cfg),
        "select_overrides": list(spec.select_overrides),
        "follow": dict(spec.select_follow),
        "method_overrides": _own_overrides(spec),
        "rule": "highest mean validation pass@1 over the seeds; an exact tie goes to the value listed first",
        "scores": {m: {v: {str(s): a for s, a in sorted(p.items())} for v, p in vs.items()} for m, vs in table.items()},
        "chosen": dict(chosen),
    }


def with_selection(spec: ComparisonSpec, chosen: dict[str, str]) -> ComparisonSpec:
    """`spec` with each method's chosen value as its method override; a method of spec.select_follow
    takes the value chosen for the method it follows (seq_mix=thinking_seeds)."""
    ((key, _),) = spec.select.items()
    full = resolve_key(key)
    chosen = {**chosen, **{m: chosen[lead] for m, lead in spec.select_follow.items() if lead in chosen}}
    kept = {m: [o for o in spec.method_overrides.get(m, []) if o.split("=", 1)[0] != full] for m in chosen}
    own = {m: [*kept[m], f"{full}={v}"] for m, v in chosen.items()}  # replaces an earlier choice (a resume)
    return spec.model_copy(update={"method_overrides": {**spec.method_overrides, **own}})
