"""`ts compare --plan`: the smallest effect the planned comparison could detect, before it trains.

    a, b = primary_pair("thinking_seeds-grpo", methods)        # the primary endpoint's two methods
    sd, how = pilot_sd(Path("docs/results/countdown-plateau"), a, b)   # 0.029, "paired differences ..."
    print(plan_text(sd, how, a, b, n_seeds=5))                  # MDE at 80% power, two-sided α 0.05

The primary endpoint is test pass@1 of method a minus method b, paired at equal seed (claims.py's
first row). Its per-seed standard deviation comes from a pilot or a prior comparison's
results.parquet (`--plan-from docs/results/<id>`) or is given (`--plan-sd 0.029`); power.py turns
it into the minimum detectable effect. With both methods in the prior results at two or more
common seeds, the sd is that of their paired differences. With only one of them (a single-method
pilot) it is that method's across-seed sd times √2: the sd of a difference of two independent runs,
an upper bound when pairing at equal seed removes shared noise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from thinking_seeds.config import ConfigError
from thinking_seeds.experiments.power import min_detectable_effect

__all__ = [
    "COMPUTE_MATCHED",
    "EQUAL_ITERATIONS",
    "PRIMARY_METRIC",
    "READINGS",
    "pilot_sd",
    "plan_text",
    "primary_pair",
]

PRIMARY_METRIC = "test/accuracy"  # test pass@1 on the whole test split (the final test)
# Which reading a comparison registers as its claims table's (the Holm family and the primary endpoint):
# the default compares each arm's final policy (compute matched when iterations differ); a protocol may
# register the equal-iterations reading instead (`ts compare --reading equal_iterations`), and then the
# compute-matched one is the reading shown beside it.
COMPUTE_MATCHED, EQUAL_ITERATIONS = "compute_matched", "equal_iterations"
READINGS = (COMPUTE_MATCHED, EQUAL_ITERATIONS)
PLAN_SEEDS = (3, 5, 10, 20)  # shown beside the planned number of seeds


def primary_pair(text: str | None, methods: Sequence[str] | None = None) -> tuple[str, str]:
    """ "a-b" -> (a, b); each must be one of `methods` when they are given (method names have no '-').
    Without `text`: Thinking Seeds' adaptive arm against GRPO when compared, else thinking_seeds − grpo."""
    names = [str(m).split(":", 1)[0] for m in methods or []]
    text = text or ("thinking_seeds_adaptive" if "thinking_seeds_adaptive" in names else "thinking_seeds") + "-grpo"
    a, sep, b = text.partition("-")
    if not sep or not a or not b or "-" in b:
        raise ConfigError(f"--primary {text!r} must name two methods as A-B, e.g. thinking_seeds-grpo")
    if methods is not None:
        missing = [m for m in (a, b) if m not in names]
        if missing:
            raise ConfigError(
                f"--primary {text}: {', '.join(missing)} is not among the compared methods ({', '.join(names)}); "
                "add it to --methods or name another pair"
            )
    return a, b


def pilot_sd(results_dir: Path, a: str, b: str, metric: str = PRIMARY_METRIC) -> tuple[float, str]:
    """The per-seed sd of a − b on `metric` from `results_dir/results.parquet`, and how it was got."""
    import pyarrow.parquet as pq

    path = Path(results_dir)
    path = path / "results.parquet" if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"--plan-from {results_dir}: no results.parquet there; give a comparison's report folder")
    rows = [r for r in pq.read_table(path).to_pylist() if r.get(metric) is not None and not math.isnan(r[metric])]
    by = {m: {int(r["seed"]): float(r[metric]) for r in rows if r["variant"] == m} for m in (a, b)}
    common = sorted(set(by[a]) & set(by[b]))
    if len(common) >= 2:
        diffs = [by[a][s] - by[b][s] for s in common]
        return statistics.stdev(diffs), f"sd of the {len(common)} paired differences {a} − {b} in {path}"
    for m in (a, b):
        if len(by[m]) >= 2:
            sd = statistics.stdev(by[m].values()) * math.sqrt(2.0)
            return sd, (
                f"√2 × the across-seed sd of {m} ({len(by[m])} seeds) in {path}: the difference of two "
                "independent runs (an upper bound for a paired one)"
            )
    variants = sorted({r["variant"] for r in rows})
    raise ConfigError(
        f"--plan-from {results_dir}: neither {a} nor {b} has {metric} at two or more seeds there "
        f"(variants: {', '.join(variants) or 'none'}); choose --primary from those, or give --plan-sd"
    )


def plan_text(sd: float, how: str, a: str, b: str, n_seeds: int, alpha: float = 0.05, power: float = 0.8) -> str:
    """What `ts compare --plan` prints: the endpoint, the sd used and the MDE by number of seeds."""
    if not sd > 0:
        raise ConfigError(f"the per-seed sd must be > 0, got {sd}")
    ns = sorted({*PLAN_SEEDS, n_seeds} - {0, 1})
    lines = [
        f"primary endpoint: test pass@1, {a} − {b}, paired at equal seed; two-sided paired t-test, "
        f"alpha {alpha}, power {power:.0%}",
        f"per-seed sd of the difference: {sd:.4f} ({how})",
        "",
        "seeds  minimum detectable effect (points of pass@1)",
    ]
    for n in ns:
        mark = "  <- this comparison" if n == n_seeds else ""
        lines.append(f"{n:>5}  {100 * min_detectable_effect(sd, n, alpha, power):.1f}{mark}")
    if n_seeds < 2:
        lines.append(f"this comparison runs {n_seeds} common seed(s) of {a} and {b}: no paired test is possible")
    return "\n".join(lines)
