"""θ_0's own sampling noise, for the rows that compare a method with θ_0.

    sd = base_sampling_sd(base_per_prompt(runs_dir, run_ids), "test/pass@64")    # e.g. 0.019
    ci, p = against_base([x_s - b for x_s in per_seed], sd)                      # wider than the t-interval

θ_0 is evaluated once (one sampling seed), and every seed's difference "method − θ_0" subtracts that
one number. The paired t-interval over seeds then treats θ_0's value as exact, though another
sampling seed gives another value (θ_0's test pass@64 on game24: 0.727 with one seed, 0.762 with
another). This module estimates how much θ_0's metric moves with the sampling seed, from θ_0's
per-prompt final-test file alone: each prompt's success rate is drawn from its Jeffreys posterior
Beta(c + ½, n − c + ½) (c correct of n samples), n samples are drawn again at that rate, and the
metric is computed on the new counts; the standard deviation over DRAWS such evaluations is θ_0's
sampling sd. (The prompts stay the same, as they do for every run: only the sampling varies. A prompt
θ_0 never solved keeps a small chance of being solved, which a plug-in redraw at c/n would deny it.)

The difference's standard error then adds both parts, sqrt(s²/n + sd₀²), and its interval and p use
Student's t with n − 1 degrees of freedom, as the paired rows do. Never imports prefect.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from thinking_seeds.algo.metrics import pass_at_k
from thinking_seeds.experiments.power import t_cdf, t_ppf

__all__ = ["DRAWS", "against_base", "base_sampling_sd"]

DRAWS = 2000
_SEED = 0  # a fixed generator: the report is the same every time it is written


def base_sampling_sd(rows: dict[str, dict[str, Any]] | None, name: str, draws: int = DRAWS) -> float | None:
    """The sd of θ_0's `name` (test/accuracy or test/pass@K) over redrawn samplings of its prompts
    (module docstring); None for another metric or without θ_0's per-prompt rows."""
    import numpy as np

    if not rows or not (name == "test/accuracy" or name.startswith("test/pass@")):
        return None
    got = [r for r in rows.values() if r.get("n")]
    if not got:
        return None
    n = np.array([int(r["n"]) for r in got])
    c = np.array([int(r["correct"]) for r in got])
    rng = np.random.default_rng(_SEED)
    p = rng.beta(c + 0.5, n - c + 0.5, size=(draws, len(got)))
    redrawn = rng.binomial(n, p)
    if name == "test/accuracy":
        values = (redrawn / n).mean(axis=1)
    else:
        k = int(name.rsplit("@", 1)[1])
        # pass@k of every possible count, per sample size (a test split has one or few sizes)
        table = {m: np.array([pass_at_k(m, j, min(k, m)) for j in range(m + 1)]) for m in set(n.tolist())}
        per_prompt = np.stack([table[int(m)][redrawn[:, i]] for i, m in enumerate(n)], axis=1)
        values = per_prompt.mean(axis=1)
    return float(values.std(ddof=1))


def against_base(diffs: Sequence[float], base_sd: float) -> tuple[tuple[float, float, float] | None, float]:
    """((mean, low, high), two-sided p) of the differences "method − θ_0" over seeds, with θ_0's
    sampling sd added to the standard error of their mean (module docstring). One difference: its
    value, a nan interval and p; none: (None, nan)."""
    xs = [float(x) for x in diffs if x is not None and not math.isnan(x)]
    if not xs:
        return None, float("nan")
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return (m, float("nan"), float("nan")), float("nan")
    se = math.sqrt(statistics.variance(xs) / len(xs) + base_sd**2)
    if se <= 0:
        return (m, m, m), (1.0 if m == 0 else 0.0)
    df = len(xs) - 1
    half = t_ppf(0.975, df) * se
    return (m, m - half, m + half), min(1.0, 2.0 * (1.0 - t_cdf(abs(m) / se, df)))
