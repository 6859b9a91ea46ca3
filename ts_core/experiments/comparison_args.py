"""The arguments of a comparison, parsed from the CLI's text and checked before any config is loaded.

    parse_list("grpo,luffy", "methods")            # ["grpo", "luffy"]
    parse_sweep(["pool.size=1,4"])                 # {"pool.size": ["1", "4"]}
    method_seeds(["grpo:0-4", "seq_mix"])          # {"grpo": [0, 1, 2, 3, 4], "seq_mix": []}
    check_request(methods, seeds, overrides, sweep, compare_id)   # normalised, or a ConfigError
    parse_method_overrides(["grpo:iterations=185"])  # {"grpo": ["iterations=185"]}

run_spec.plan and spec.ComparisonSpec build on these; the checks that need every run's config (the
shared budget) are run_spec.py's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from thinking_seeds.config import ALGORITHMS, ConfigError

__all__ = [
    "ALIASES",
    "RESERVED_KEYS",
    "RUN_ID_RE",
    "check_method_overrides",
    "check_request",
    "check_selection",
    "method_seeds",
    "parse_list",
    "parse_method_overrides",
    "parse_sweep",
    "resolve_key",
    "value_text",
]

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]*$")
RESERVED_KEYS = ("algorithm", "seed")  # set by the planner, once per run


def parse_list(text: str | Sequence[str], what: str) -> list[str]:
    """ "a,b" or ["a,b", "c"] -> ["a", "b", "c"] (blank items are an error)."""
    items = [text] if isinstance(text, str) else list(text)
    out = [x.strip() for item in items for x in str(item).split(",")]
    if not out or any(not x for x in out):
        raise ConfigError(f"{what}: {items!r} has an empty item; give a comma-separated list like a,b,c")
    return out


def parse_sweep(items: Sequence[str]) -> dict[str, list[str]]:
    """["pool.size=1,4", "prefix.ratio_max=0.4,0.8"] -> {"pool.size": ["1", "4"], ...}."""
    sweep: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"sweep {item!r} must look like section.key=v1,v2 (e.g. pool.size=1,4)")
        key, values = item.split("=", 1)
        key = key.strip()
        if key in sweep:
            raise ConfigError(f"sweep key {key!r} is given twice; list all its values once: {key}=v1,v2,...")
        sweep[key] = parse_list(values, f"sweep {key}")
    return sweep


def value_text(v: Any) -> str:
    """A config value as --set text (booleans lower-case, as YAML reads them)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def method_seeds(methods: Sequence[str]) -> dict[str, list[int]]:
    """["grpo:0-4", "luffy:0-1", "seq_mix"] -> {"grpo": [0..4], "luffy": [0, 1], "seq_mix": []}.

    A method may carry its own seed range (`name:lo-hi` or `name:s`); [] means the comparison's
    --seeds. Lets one comparison spend more seeds where the question is sharpest (issue #9: grpo and
    thinking_seeds 5 seeds, seq_mix 3, luffy and prefix_context 2).
    """
    out: dict[str, list[int]] = {}
    for item in methods:
        name, _, rng = str(item).partition(":")
        name = name.strip()
        if name in out:
            raise ConfigError(f"methods name {name!r} twice")
        if not rng:
            out[name] = []
            continue
        lo, _, hi = rng.partition("-")
        try:
            out[name] = list(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ConfigError(
                f"method {item!r}: seeds must be a range like {name}:0-4 or one seed like {name}:3"
            ) from None
        if not out[name]:
            raise ConfigError(f"method {item!r}: the seed range is empty; write it low-high, e.g. {name}:0-4")
    return out


def check_request(
    methods: Sequence[str],
    seeds: Sequence[int],
    overrides: Sequence[str] | None,
    sweep: dict[str, list[Any]] | None,
    compare_id: str,
) -> tuple[dict[str, list[int]], list[int], list[str], dict[str, list[str]]]:
    """The checks of a comparison's arguments that need no config: plain id, known methods, distinct
    seeds, no per-run key (algorithm, seed) in --set or --sweep. Returns them normalised:
    ({method: own seeds or []}, seeds, overrides, {key: [value as text]}); raises ConfigError."""
    if not RUN_ID_RE.match(compare_id or ""):
        raise ConfigError(f"comparison id {compare_id!r} must be a plain name (letters, digits, . _ = + -)")
    per_method = method_seeds(methods)
    if not per_method:
        raise ConfigError("no methods: give at least one of " + ", ".join(ALGORITHMS))
    unknown = [m for m in per_method if m not in ALGORITHMS]
    if unknown:
        raise ConfigError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(ALGORITHMS)}")
    try:
        seeds = [int(s) for s in seeds]
    except (TypeError, ValueError):
        raise ConfigError(f"seeds must be integers, got {list(seeds)!r}") from None
    if not seeds:
        raise ConfigError("no seeds: give at least one (e.g. 0,1,2)")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds {seeds} name a seed twice")
    overrides = list(overrides or [])
    sweep = {k: [value_text(v) for v in vs] for k, vs in (sweep or {}).items()}
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key in RESERVED_KEYS:
            raise ConfigError(f"--set {item}: the comparison sets {key} per run; use --methods / --seeds instead")
    for key, values in sweep.items():
        if key in RESERVED_KEYS:
            raise ConfigError(f"sweep over {key!r}: use --methods / --seeds for that")
        if not values:
            raise ConfigError(f"sweep {key!r} has no values")
        if len(set(values)) != len(values):
            raise ConfigError(f"sweep {key!r} repeats a value: {values}")
    # A key both --set and swept has no single base value: the run markers could not tell the shared
    # setting from the sweep point (spec_of), so a report could pair against the wrong base point.
    shared = {item.split("=", 1)[0].strip() for item in overrides}
    for key in sweep:
        if key in shared:
            raise ConfigError(f"--set {key}=... and --sweep {key}=... both set {key}: keep it in --sweep only")
    return per_method, seeds, overrides, sweep


def parse_method_overrides(items: Sequence[str]) -> dict[str, list[str]]:
    """["grpo:iterations=185", "thinking_seeds:prefix.ratio_of=budget"] -> {method: [key=value]}
    (--method-set: a setting of one method only)."""
    out: dict[str, list[str]] = {}
    for item in items:
        method, sep, setting = str(item).partition(":")
        if not sep or "=" not in setting or not method.strip() or not setting.split("=", 1)[0].strip():
            raise ConfigError(
                f"--method-set {item!r} must look like METHOD:section.key=value (e.g. grpo:iterations=185)"
            )
        out.setdefault(method.strip(), []).append(setting.strip())
    return out


def check_method_overrides(
    method_overrides: dict[str, list[str]],
    methods: Sequence[str],
    sweep: dict[str, list[str]],
    budget_keys: Sequence[str],
    compute_keys: Sequence[str] = ("iterations",),
) -> None:
    """--method-set: a compared method, a key set once, not per run (algorithm, seed), not swept (a
    sweep point would have two values), and no budget key but the compute-matching ones. A key also
    --set is this method's own value over the shared one (it applies after --set)."""
    compared = set(method_seeds(methods))
    swept = set(sweep)
    for method, settings in method_overrides.items():
        if method not in compared:
            raise ConfigError(f"--method-set {method}:...: {method} is not compared (--methods {','.join(compared)})")
        keys = [o.split("=", 1)[0].strip() for o in settings]
        for key in keys:
            if keys.count(key) > 1:
                raise ConfigError(f"--method-set {method}:{key}=... is given twice; give it once")
            if key in RESERVED_KEYS:
                raise ConfigError(f"--method-set {method}:{key}: the comparison sets {key} per run")
            if key in swept:
                raise ConfigError(f"--method-set {method}:{key} and --sweep {key} both set it: keep one")
            budget = any(key == b or key.startswith(b + ".") for b in budget_keys)
            if budget and key not in compute_keys:
                raise ConfigError(
                    f"--method-set {method}:{key}: a budget key is shared by every run; only "
                    f"{', '.join(compute_keys)} may differ (to match compute)"
                )


ALIASES = {"lr": "update.lr"}  # --select's short names for the usual grids (selection.py)


def resolve_key(key: str) -> str:
    return ALIASES.get(key.strip(), key.strip())


def check_selection(
    select: dict[str, list[str]], overrides: Sequence[str], sweep: dict[str, list[str]], budget_keys: Sequence[str]
) -> None:
    """--select (selection.py): one key, a grid of two or more values, not a budget key, not also
    --set or --sweep (it would have no single value)."""
    if len(select) != 1:
        raise ConfigError(f"--select takes one key and its grid (e.g. lr=1e-4,3e-4,1e-3), got {sorted(select)}")
    ((key, grid),) = select.items()
    full = resolve_key(key)
    if len(grid) < 2:
        raise ConfigError(f"--select {key}={','.join(grid)}: a grid needs two or more values")
    if any(full == b or full.startswith(b + ".") for b in budget_keys):
        raise ConfigError(f"--select {full}: a budget key is shared by every run; select a method setting (lr, ...)")
    if sweep:
        raise ConfigError("--select and --sweep together: select first, then run the ablation as its own comparison")
    if full in {o.split("=", 1)[0].strip() for o in overrides}:
        raise ConfigError(f"--set {full}=... and --select {key}=...: the selection sets {full}; drop the --set")
