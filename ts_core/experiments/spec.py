"""The data model of a comparison: what runs it is made of, and what they must share.

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
at a time with `one_at_a_time`).

The whole request of `ts compare` is one ComparisonSpec (a pydantic model: the CLI builds it, the
Prefect flow receives it, run_comparison runs it). Pure data and validation: nothing here starts a
process or reads a run directory (members.py reads them, compare.py runs them). The arguments'
parsing and the checks that need no config are comparison_args.py's (re-exported here). Over 400
lines because ComparisonSpec is the whole request in one typed model (every `ts compare` option,
with its help text), and splitting it would give the CLI, the flow and run_comparison two models.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from thinking_seeds.config import ConfigError, RunConfig, load_config
from thinking_seeds.experiments.comparison_args import (
    RESERVED_KEYS,
    RUN_ID_RE,
    check_method_overrides,
    check_request,
    check_selection,
    method_seeds,
    parse_list,
    parse_method_overrides,
    parse_sweep,
    value_text,
)
from thinking_seeds.experiments.planning import COMPUTE_MATCHED, READINGS, primary_pair
from thinking_seeds.pipeline.checkpoint_eval import FINAL_TEST_STAGE

__all__ = [
    "BUDGET_KEYS",
    "COMPUTE_MATCH_KEYS",
    "CONTROL_METHOD",
    "DEFAULT_METHODS",
    "FINAL_TEST_STAGE",
    "MARKER",
    "PROTOCOL_FILE",
    "TRAINING_TIME_SQL",
    "ComparisonSpec",
    "RunSpec",
    "training_seconds_sql",
    "check_request",
    "check_same_budget",
    "compute_matched",
    "dotted",
    "method_seeds",
    "parse_list",
    "parse_sweep",
    "plan",
    "spec_of",
    "value_text",
]

# The five methods of the headline comparison (docs/algorithm.md §4; dr_grpo is available too).
DEFAULT_METHODS = ("grpo", "seq_mix", "luffy", "prefix_context", "thinking_seeds")
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


class ComparisonSpec(BaseModel):
    """Everything one `ts compare` asks for, validated: the CLI builds it, the Prefect flow
    (`thinking_seeds.flows.compare.compare_flow`) takes it as its one parameter (it serialises to
    JSON) and `thinking_seeds.experiments.compare.run_comparison` runs it.

    Building it checks what needs no config (ComparisonSpec.of turns pydantic's errors into one
    ConfigError line each); `runs()` resolves every run's config and checks the shared budget.
    List fields also take the CLI's comma-separated text ("grpo,luffy", "0,1,2", ["pool.size=1,4"]).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    compare_id: str = Field("compare", description="Comparison name: run ids are ID-METHOD[-KEY=VAL]-sSEED.")
    preset: str = Field("tiny", description="Preset name (data/presets/NAME.yaml) or a YAML path.")
    methods: list[str] = Field(
        default_factory=lambda: list(DEFAULT_METHODS),
        description="Methods (algorithm presets); a method may name its own seeds, e.g. grpo:0-4 (else `seeds`).",
    )
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], description="Seeds of every method without its own.")
    overrides: list[str] = Field(default_factory=list, description="section.key=value for every run (--set).")
    sweep: dict[str, list[str]] = Field(
        default_factory=dict, description="Ablation: dotted key -> values (the cartesian product is run)."
    )
    one_at_a_time: bool = Field(False, description="Vary one sweep key at a time from the base config instead.")
    reference: str | None = Field(
        None,
        description="Comparison whose unswept runs (same methods and seeds) are the "
        "ablation's base point instead of training them again; budgets must match.",
    )
    parallel: int = Field(2, ge=1, description="Runs trained at once (one process and one torch thread each).")
    out_dir: str = Field("docs/results", description="The report goes to OUT/ID/ (report.md, PNG, results.parquet).")
    control: bool = Field(True, description="Train the equal-compute SFT control, one per seed.")
    control_seconds: float | None = Field(
        None, ge=0.0, description="SFT control budget in seconds (default: the mean RL run's training time)."
    )
    control_corpus_size: int | None = Field(
        None, ge=1, description="Worked solutions generated for the SFT control (default 50000)."
    )
    control_max_steps: int | None = Field(None, ge=1, description="Stop each SFT control after this many steps.")
    control_seeds: list[int] | None = Field(
        None, description="Seeds of the SFT control (default: every seed the RL runs use), e.g. 200-202."
    )
    final_test: bool = Field(True, description="Evaluate every final policy (and θ_0) on the whole test split.")
    archive: bool = Field(
        False,
        description="Copy the small result files of every finished run into OUT/ID/runs/ "
        "(commit it): a later session resumes the comparison without training them again.",
    )
    command: str | None = Field(None, description="The command line that produced it, quoted in the report.")
    primary: str | None = Field(
        None,
        description="The primary endpoint's pair A-B (test pass@1, A − B at equal seed); default "
        "thinking_seeds_adaptive-grpo when that method is compared, else thinking_seeds-grpo.",
    )
    reading: str = Field(
        COMPUTE_MATCHED,
        description="The registered reading of the claims table (its Holm family and primary endpoint) when "
        "methods train different iterations: compute_matched (each arm's final policy) or equal_iterations "
        "(the longer arm's checkpoint at the shorter arm's count); the other reading is shown beside it.",
    )
    amend_protocol: bool = Field(
        False, description="Accept a protocol that differs from the registered protocol.json, recording the amendment."
    )
    select: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Validation selection: key -> grid (lr=1e-4,3e-4), trained for every method on "
        "select_seeds; each method gets the value with the best mean validation pass@1 (selection.py).",
    )
    select_seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], description="Seeds of the selection runs.")
    select_methods: list[str] | None = Field(
        None,
        description="The methods the selection tunes (default: all); the others keep the preset's value, "
        "e.g. a reference method that is not part of the primary question.",
    )
    select_follow: dict[str, str] = Field(
        default_factory=dict,
        description="Untuned method -> the tuned method whose chosen value it takes (--select-follow "
        "seq_mix=thinking_seeds: a sibling gets the same setting without its own grid).",
    )
    select_overrides: list[str] = Field(
        default_factory=list,
        description="eval.key=value for the selection runs only (--select-set): e.g. eval.every=1000 skips "
        "their in-training evaluations, which the choice does not read (it evaluates each final policy itself).",
    )
    method_overrides: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per-method settings: method -> [key=value] (--method-set METHOD:KEY=VALUE, and what the "
        "selection chose). Budget keys are shared, except iterations (COMPUTE_MATCH_KEYS: matching compute).",
    )

    @field_validator("methods", mode="before")
    @classmethod
    def _split_methods(cls, v: Any) -> Any:
        return parse_list(v, "methods")

    @field_validator("overrides", mode="before")
    @classmethod
    def _no_overrides(cls, v: Any) -> Any:
        return [] if v is None else v

    @field_validator("out_dir", mode="before")
    @classmethod
    def _path_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, Path) else v

    @field_validator("seeds", mode="before")
    @classmethod
    def _split_seeds(cls, v: Any) -> Any:
        items = parse_list([str(x) for x in v] if not isinstance(v, str) else v, "seeds")
        if not all(x.lstrip("-").isdigit() for x in items):
            raise ValueError(f"--seeds must be integers, got {v!r}")
        return [int(x) for x in items]

    @field_validator("control_seeds", mode="before")
    @classmethod
    def _split_control_seeds(cls, v: Any) -> Any:
        return None if v is None else cls._split_select_seeds(v)

    @field_validator("select_seeds", mode="before")
    @classmethod
    def _split_select_seeds(cls, v: Any) -> Any:
        return list(method_seeds([f"x:{v}"])["x"]) if isinstance(v, str) and "-" in v else cls._split_seeds(v)

    @field_validator("sweep", "select", mode="before")
    @classmethod
    def _split_sweep(cls, v: Any) -> Any:
        if v is None:
            return {}
        if isinstance(v, dict):
            return {k: [value_text(x) for x in vs] for k, vs in v.items()}
        return parse_sweep(list(v))

    @field_validator("method_overrides", mode="before")
    @classmethod
    def _split_method_overrides(cls, v: Any) -> Any:
        return parse_method_overrides(v) if isinstance(v, list | tuple) else ({} if v is None else v)

    @field_validator("select_methods", mode="before")
    @classmethod
    def _split_select_methods(cls, v: Any) -> Any:
        return None if v is None else parse_list(v, "select_methods")

    @field_validator("select_follow", mode="before")
    @classmethod
    def _split_follow(cls, v: Any) -> Any:
        if v is None or isinstance(v, dict):
            return v or {}
        pairs = [x.split("=", 1) for x in parse_list(v, "select_follow")]
        if any(len(p) != 2 for p in pairs):
            raise ValueError(f"--select-follow {v!r} must look like METHOD=TUNED_METHOD (e.g. seq_mix=thinking_seeds)")
        return {a.strip(): b.strip() for a, b in pairs}

    @field_validator("select_overrides", mode="before")
    @classmethod
    def _no_select_overrides(cls, v: Any) -> Any:
        return [] if v is None else v

    @model_validator(mode="after")
    def _request(self) -> ComparisonSpec:
        check_request(self.methods, self.seeds, self.overrides, self.sweep, self.compare_id)
        check_method_overrides(self.method_overrides, self.methods, self.sweep, BUDGET_KEYS, COMPUTE_MATCH_KEYS)
        for item in self.select_overrides:
            if not item.split("=", 1)[0].strip().startswith("eval.") or "=" not in item:
                raise ValueError(
                    f"--select-set {item}: only eval.KEY=VALUE (the selection runs' own evaluation) may differ "
                    "from the confirmatory runs; e.g. --select-set eval.every=1000"
                )
        if self.reference is not None and not RUN_ID_RE.match(self.reference):
            raise ValueError(f"reference {self.reference!r} must be a comparison id (a plain name)")
        if self.primary is not None:
            primary_pair(self.primary, self.methods)
        if self.reading not in READINGS:
            raise ValueError(f"--reading {self.reading}: one of {', '.join(READINGS)}")
        if self.select:
            check_selection(self.select, self.overrides, self.sweep, BUDGET_KEYS)
            compared = set(method_seeds(self.methods))
            unknown = set(self.select_methods or []) - compared
            if unknown:
                raise ValueError(f"--select-methods {','.join(sorted(unknown))}: not compared (--methods)")
            tuned = set(self.select_methods or compared)
            for m, lead in self.select_follow.items():
                if m not in compared or m in tuned or lead not in tuned:
                    raise ValueError(
                        f"--select-follow {m}={lead}: {m} must be a compared method the selection does not tune "
                        f"(--select-methods) and {lead} one it tunes"
                    )
        elif self.select_methods or self.select_follow:
            raise ValueError(
                "--select-methods/--select-follow without --select: give the grid too (e.g. --select lr=1e-4,3e-4)"
            )
        return self

    @classmethod
    def of(cls, **fields: Any) -> ComparisonSpec:
        """Build and validate; a mistake is a ConfigError with one line per field."""
        try:
            return cls(**fields)
        except ValidationError as e:
            lines = []
            for err in e.errors():
                key, msg = ".".join(map(str, err["loc"])), err["msg"].removeprefix("Value error, ")
                lines.append(msg if key in msg else f"{key}: {msg}")  # name the field once
            raise ConfigError("; ".join(lines)) from None

    def runs(self) -> list[RunSpec]:
        """The planned runs (RL only; the SFT controls are sft_control's), budgets checked."""
        return plan(
            self.preset,
            self.methods,
            self.seeds,
            self.overrides,
            self.sweep or None,
            self.compare_id,
            self.one_at_a_time,
            self.method_overrides or None,
        )

    def control_seed_list(self, specs: Sequence[RunSpec]) -> list[int]:
        """The SFT controls' seeds: --control-seeds, else every seed of the planned runs."""
        return list(self.control_seeds) if self.control_seeds is not None else sorted({s.seed for s in specs})

    def plan_text(self) -> str:
        """The methods with the seeds each runs, for the start line of a comparison:
        'grpo:0-4, luffy:0-1' or 'grpo, luffy x seeds 0,1,2' (mixed: both, the shared seeds named)."""
        own = method_seeds(self.methods)
        text = ", ".join(self.methods)
        shared = [m for m, seeds in own.items() if not seeds]
        if not shared:  # every method names its own seeds: --seeds is unused
            return text
        seeds = ",".join(map(str, self.seeds))
        if len(shared) == len(own):
            return f"{text} x seeds {seeds}"
        return f"{text}; seeds {seeds} for {', '.join(shared)}"

    @property
    def primary_pair(self) -> tuple[str, str] | None:
        """(a, b) of the primary endpoint: test pass@1, a − b at equal seed; None when no --primary
        is given and the comparison lacks the default pair's methods (an ablation, say)."""
        try:
            return primary_pair(self.primary, self.methods)
        except ConfigError:
            if self.primary is not None:
                raise
            return None

    @property
    def report_dir(self) -> Path:
        """Where the report goes: <out_dir>/<compare_id>/."""
        return Path(self.out_dir) / self.compare_id
