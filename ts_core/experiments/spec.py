"""The whole request of a comparison: ComparisonSpec, what `ts compare` asks for.

One pydantic model: the CLI builds it, the Prefect flow receives it, run_comparison runs it. Building
it checks what needs no config; `runs()` plans the runs and checks their shared budget (run_spec.py:
RunSpec, `plan`, BUDGET_KEYS). Pure data and validation: nothing here starts a process or reads a run
directory (members.py reads them, compare.py runs them). The arguments' parsing and the checks that
need no config are comparison_args.py's (re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from thinking_seeds.config import ConfigError
from thinking_seeds.experiments.comparison_args import (
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
from thinking_seeds.experiments.run_spec import BUDGET_KEYS, COMPUTE_MATCH_KEYS, RunSpec, plan

__all__ = ["DEFAULT_METHODS", "ComparisonSpec", "parse_list", "parse_sweep"]

# The five methods of the headline comparison (docs/algorithm.md §4; dr_grpo is available too).
DEFAULT_METHODS = ("grpo", "seq_mix", "luffy", "prefix_context", "thinking_seeds")


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

    @field_validator("overrides", "select_overrides", mode="before")
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
        return None if v is None else _option_seeds(v, "--control-seeds", "200-202 or 200,201")

    @field_validator("select_seeds", mode="before")
    @classmethod
    def _split_select_seeds(cls, v: Any) -> Any:
        return _option_seeds(v, "--select-seeds", "0-2 or 0,1,2")

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
                named = key in msg or f"--{key.replace('_', '-')}" in msg  # the field, or its option
                lines.append(msg if named else f"{key}: {msg}")  # name the field once
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


def _option_seeds(v: Any, option: str, example: str) -> list[int]:
    """An option's seeds, a range (lo-hi) or a list (a,b,...), each seed once -- as --seeds takes them
    (a seed named twice would train the same run twice)."""
    if isinstance(v, str) and "-" in v:
        lo, _, hi = v.partition("-")
        try:
            seeds = list(range(int(lo), int(hi) + 1))
        except ValueError:
            raise ValueError(f"{option} {v!r}: give seeds as a range or a list, e.g. {example}") from None
        if not seeds:
            raise ValueError(f"{option} {v!r}: the seed range is empty; write it low-high, e.g. {example}")
        return seeds
    items = parse_list([str(x) for x in v] if not isinstance(v, str) else v, option)
    if not all(x.lstrip("-").isdigit() for x in items):
        raise ValueError(f"{option} {v!r}: seeds must be integers, as a range or a list, e.g. {example}")
    if len(set(map(int, items))) != len(items):
        raise ValueError(f"{option} {v!r} names a seed twice; give each seed once, e.g. {example}")
    return [int(x) for x in items]
