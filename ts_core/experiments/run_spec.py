"""The runs of a comparison: RunSpec, the planner that expands a request into them, and the shared budget.

    specs = plan("tiny", ["grpo", "thinking_seeds"], [0, 1, 2], overrides=["iterations=60"],
                 sweep={"prefix.ratio_max": ["0.4", "0.8"]}, compare_id="abl")
    [s.run_id for s in specs]   # ["abl-grpo-prefix.ratio_max=0.4-s0", ...]

`plan` expands (method, sweep point, seed) into RunSpecs whose run ids read
`<compare_id>-<method>[-<key>=<value>...]-s<seed>` and whose overrides are the shared ones, then the
sweep point, then `algorithm=<method>` and `seed=<seed>`. It resolves every configuration and refuses
a comparison whose runs would not see the same task, the same prompts per iteration, the same
samples per prompt, the same number of iterations and the same evaluation (BUDGET_KEYS): a method
that is better only because it saw more data is not a result. Ablations are sweeps through the same
planner (`--sweep pool.size=1,4 --sweep prefix.ratio_max=0.4,0.8`: the cartesian product, or one key
at a time with `one_at_a_time`). `spec_of` reads a RunSpec back from a run's `compare.json` marker,
and `training_seconds_sql` is what counts as a run's training time (the SFT control's budget).

Apart from spec.py (the whole request, ComparisonSpec) because every module that handles a single run
of a comparison (members, sft_control, recorded_defaults, archive) needs these and not the request.
Pure data and validation: nothing here starts a process or reads a run directory.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from thinking_seeds.config import ConfigError, RunConfig, load_config
from thinking_seeds.experiments.comparison_args import RESERVED_KEYS, RUN_ID_RE, check_request, value_text
from thinking_seeds.pipeline.checkpoint_eval import FINAL_TEST_STAGE

__all__ = [
    "BUDGET_KEYS",
    "COMPUTE_MATCH_KEYS",
    "CONTROL_METHOD",
    "MARKER",
    "PROTOCOL_FILE",
    "TRAINING_TIME_SQL",
    "RunSpec",
    "check_same_budget",
    "compute_matched",
    "dotted",
    "plan",
    "spec_of",
    "training_seconds_sql",
]

CONTROL_METHOD = "sft_control"
MARKER = "compare.json"  # in every run directory of a comparison: RunSpec.marker()
PROTOCOL_FILE = "protocol.json"  # in a comparison's report folder: its registered protocol (protocol.py)
# What every run of a comparison must share (dotted keys of RunConfig; a section means all of it).
BUDGET_KEYS = (
    "data",  # the task: data set, sizes, generator seed
    "model.path",  # the same starting point
    "iterations",
    "rollout.prompts_per_iteration",
    "rollout.group_size",  # samples per prompt (seeded + on-policy)
    "rollout.max_new_tokens",
    "rollout.temperature",
    "eval",  # the same evaluation: split, prompts, samples, temperature, seeded pass@k
)
# Budget keys a method may set for itself (`--method-set grpo:iterations=185`): matching compute by
# giving a cheaper method more iterations. Recorded in the protocol and shown in the report.
COMPUTE_MATCH_KEYS = ("iterations",)
# SQL filter over the metrics view: the time/* metrics that count as training. Evaluations of any
# kind are left out of the budget: in-training and nightly `evaluate-<split>` stages, the final test and
# the stages named after it (`final-test-equal-iterations`, an earlier checkpoint tested later), and any
# evaluation's own timings (`time/evaluate/*`, whatever stage files them: the selection's, say).
TRAINING_TIME_SQL = (
    "starts_with(name, 'time/') AND NOT starts_with(name, 'time/evaluate/') "
    f"AND NOT starts_with(stage, 'evaluate') AND NOT starts_with(stage, '{FINAL_TEST_STAGE}')"
)


def training_seconds_sql(source: str) -> str:
    """`SELECT run_id, seconds`: each run's training wall time, from `source` (the metrics view or a
    CTE over it with the same columns).

    The stages' `time/*` metrics (TRAINING_TIME_SQL), except the parts of a seeds stage that were
    sampled ahead (`perf/seeds_ahead` = 1 in that iteration, pipeline/seeds_ahead.py): they ran in a
    thread beside update k-1, whose own time already covers that wall time, and counting both
    doubled the seeded methods' budget (and so the SFT control's). The seeds stage's own io stays.

    Each side is filtered where it is read and then joined: a correlated EXISTS over the whole
    metrics view ran out of DuckDB's memory on 35 full-length runs (game24-main's SFT control budget).
    """
    return f"""
        SELECT t.run_id, sum(t.value) AS seconds
        FROM (SELECT run_id, iteration, stage, name, value FROM {source} WHERE {TRAINING_TIME_SQL}) t
        LEFT JOIN (SELECT DISTINCT run_id, iteration FROM {source}
                   WHERE stage = 'seeds' AND name = 'perf/seeds_ahead' AND value = 1) a
          ON a.run_id = t.run_id AND a.iteration = t.iteration
        WHERE NOT (t.stage = 'seeds' AND t.name <> 'time/seeds/io' AND a.run_id IS NOT NULL)
        GROUP BY t.run_id"""


@dataclass(frozen=True)
class RunSpec:
    """One run of a comparison: what `ts train` would be called with."""

    run_id: str
    compare_id: str
    method: str
    seed: int
    preset: str
    base_overrides: tuple[str, ...] = ()  # shared by every run of the comparison
    sweep: tuple[tuple[str, str], ...] = ()  # this run's sweep point, (dotted key, value)
    method_overrides: tuple[str, ...] = ()  # this method's own settings (chosen on validation: selection.py)
    # Old values of changed defaults that the comparison's record of this run holds (recorded_defaults.py),
    # applied after `overrides`: on the job's command line, never in the marker or the protocol's overrides.
    kept: tuple[str, ...] = ()

    @property
    def overrides(self) -> list[str]:
        """--set values in the order they apply: shared, sweep point, the method's own, method, seed."""
        return [
            *self.base_overrides,
            *(f"{k}={v}" for k, v in self.sweep),
            *self.method_overrides,
            f"algorithm={self.method}",
            f"seed={self.seed}",
        ]

    @property
    def variant(self) -> str:
        """Method plus sweep point: what the report groups seeds by."""
        return " ".join([self.method, *(f"{k}={v}" for k, v in self.sweep)])

    def config(self) -> RunConfig:
        return load_config(self.preset, [*self.overrides, *self.kept])

    def marker(self) -> dict[str, Any]:
        return {
            "compare_id": self.compare_id,
            "run_id": self.run_id,
            "method": self.method,
            "seed": self.seed,
            "variant": self.variant,
            "sweep": dict(self.sweep),
            "preset": self.preset,
            "overrides": self.overrides,
        }


def dotted(cfg: dict[str, Any], key: str) -> Any:
    """cfg["a"]["b"] for key "a.b"."""
    node: Any = cfg
    for part in key.split("."):
        node = node[part]
    return node


def compute_matched(specs: Sequence[RunSpec]) -> set[str]:
    """The COMPUTE_MATCH_KEYS some method of `specs` sets for itself: those may differ between runs."""
    own = {o.split("=", 1)[0].strip() for s in specs for o in s.method_overrides}
    return own & set(COMPUTE_MATCH_KEYS)


def check_same_budget(configs: dict[str, RunConfig], may_differ: Sequence[str] | set[str] = ()) -> None:
    """Raise ConfigError unless every run agrees on BUDGET_KEYS (except `may_differ`: the keys a
    method sets for itself to match compute, see compute_matched); the message names runs, keys and values."""
    if not configs:
        return
    items = list(configs.items())
    ref_id, ref = items[0]
    ref_d = ref.model_dump(mode="json")
    problems: list[str] = []
    for run_id, cfg in items[1:]:
        d = cfg.model_dump(mode="json")
        for key in (k for k in BUDGET_KEYS if k not in may_differ):
            a, b = dotted(ref_d, key), dotted(d, key)
            if a != b:
                if isinstance(a, dict) and isinstance(b, dict):
                    diff = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
                    for k, (x, y) in diff.items():
                        problems.append(f"{run_id} has {key}.{k}={y!r} but {ref_id} has {x!r}")
                else:
                    problems.append(f"{run_id} has {key}={b!r} but {ref_id} has {a!r}")
    if problems:
        shown = problems[:8] + ([f"... and {len(problems) - 8} more"] if len(problems) > 8 else [])
        raise ConfigError(
            "the runs of a comparison must share the task, prompts per iteration, samples per prompt, "
            "iterations and evaluation, but:\n  "
            + "\n  ".join(shown)
            + "\nset these once for all methods (--set), and sweep only method settings (prefix.*, pool.*, "
            "rollout.seeds_per_group, ...)"
        )


def plan(
    preset: str,
    methods: Sequence[str],
    seeds: Sequence[int],
    overrides: Sequence[str] | None = None,
    sweep: dict[str, list[Any]] | None = None,
    compare_id: str = "compare",
    one_at_a_time: bool = False,
    method_overrides: dict[str, Sequence[str]] | None = None,
) -> list[RunSpec]:
    """Every (method, sweep point, seed) of the comparison as a RunSpec, validated (see module doc).

    `method_overrides` gives a method settings of its own (`{"grpo": ["update.lr=3e-4"]}`: what the
    validation selection chose for it); they are not part of the run id.

    Sweep points are the cartesian product of the sweep's values, or with `one_at_a_time` one key
    varied at a time from the base configuration (the usual ablation: 2 keys x 2 values = 4
    points, not 4 combinations; the base point itself is not run — see `reference_members`).
    """
    per_method, seeds, overrides, sweep = check_request(methods, seeds, overrides, sweep, compare_id)
    methods = list(per_method)
    if not sweep:
        points: list[tuple[tuple[str, str], ...]] = [()]
    elif one_at_a_time:
        points = [((k, v),) for k, vs in sweep.items() for v in vs]
    else:
        points = [tuple(zip(sweep, combo, strict=True)) for combo in itertools.product(*sweep.values())]

    specs: list[RunSpec] = []
    for method in methods:
        for point in points:
            for seed in per_method[method] or seeds:
                parts = [compare_id, method, *(f"{k}={v}" for k, v in point), f"s{seed}"]
                run_id = "-".join(parts)
                if not RUN_ID_RE.match(run_id) or "/" in run_id:
                    raise ConfigError(
                        f"run id {run_id!r} would not be a plain directory name; "
                        "sweep values may use letters, digits and . _ = + - only"
                    )
                own = tuple((method_overrides or {}).get(method, ()))
                specs.append(RunSpec(run_id, compare_id, method, seed, preset, tuple(overrides), tuple(point), own))
    if len({s.run_id for s in specs}) != len(specs):
        raise ConfigError("two runs of the plan got the same run id; make the sweep values distinct")

    configs: dict[str, RunConfig] = {}
    for spec in specs:
        try:
            configs[spec.run_id] = spec.config()
        except ConfigError as e:
            point = dict(spec.sweep) or "-"
            raise ConfigError(f"run {spec.run_id} (method {spec.method}, sweep {point}): {e}") from None
    check_same_budget(configs, compute_matched(specs))
    return specs


def spec_of(marker: dict[str, Any]) -> RunSpec:
    """The RunSpec a run's `compare.json` marker was written from."""
    sweep = tuple((k, value_text(v)) for k, v in (marker.get("sweep") or {}).items())
    point = {f"{k}={v}" for k, v in sweep}
    base = tuple(o for o in marker.get("overrides", []) if o.split("=", 1)[0] not in RESERVED_KEYS and o not in point)
    return RunSpec(
        marker["run_id"],
        marker["compare_id"],
        marker["method"],
        int(marker["seed"]),
        marker.get("preset", "tiny"),
        base,
        sweep,
    )
