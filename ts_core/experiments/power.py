"""How many seeds a comparison needs, and how sure its answers are: the paired t-test's numbers.

    min_detectable_effect(0.029, 5)       # 0.049: 80% power, two-sided alpha 0.05, paired t, 5 seeds
    paired_t_p([-0.036, -0.020, 0.002])   # two-sided p of "mean difference = 0"
    holm([0.0007, 0.004, 0.022, 0.045])   # Holm-adjusted p-values, in the input's order

A comparison's primary endpoint is a paired difference at equal seed (claims.py), so its power is
the paired t-test's: with n seeds whose per-seed differences have sd σ, a true mean difference Δ
gives the statistic T = mean/(s/√n) a noncentral t distribution with n − 1 degrees of freedom and
noncentrality δ = Δ√n/σ. The minimum detectable effect is the Δ at which P(|T| > t_{1−α/2, n−1})
reaches the target power.

scipy.stats (t, nct) is used when it is installed. Without it the same numbers come from their
definitions: Student's t CDF through the regularized incomplete beta function (a continued
fraction), and the noncentral t's tail probabilities by integrating Φ over the chi-distributed
denominator (Simpson's rule on a fine grid; the integrand is smooth, so the error is far below the
digits shown). tests/unit/test_power.py checks them against the issue's figures (sd 0.029: 4.9
points at 5 seeds, 2.9 at 10, 1.9 at 20) and against table values.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = [
    "holm",
    "min_detectable_effect",
    "noncentral_t_power",
    "paired_t_p",
    "t_cdf",
    "t_ppf",
]


def _have_scipy() -> bool:
    try:
        import scipy.stats  # noqa: F401
    except ImportError:
        return False
    return True


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), for x < (a+1)/(a+b+2)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    if _have_scipy():
        from scipy.stats import t as student

        return float(student.cdf(t, df))
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """The q quantile of Student's t (bisection on t_cdf)."""
    if _have_scipy():
        from scipy.stats import t as student

        return float(student.ppf(q, df))
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < q else (lo, mid)
    return (lo + hi) / 2


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def noncentral_t_power(delta: float, df: float, t_crit: float, points: int = 1000) -> float:
    """P(|T'| > t_crit) for T' = (Z + delta) / S, S = sqrt(V/df), V ~ chi²(df): the two-sided t-test's
    power at noncentrality `delta`.

    Without scipy: ∫ [Φ(delta − t_crit·s) + Φ(−delta − t_crit·s)] f_S(s) ds by Simpson's rule, f_S
    the density of sqrt(chi²(df)/df), on [0, s_max] where the density's tail is below 1e-16.
    """
    if _have_scipy():
        from scipy.stats import nct

        return float(nct.sf(t_crit, df, delta) + nct.cdf(-t_crit, df, delta))
    import numpy as np

    # log f_S(s) = log 2 + (df/2) log(df/2) − lgamma(df/2) + (df−1) log s − df s²/2
    const = math.log(2.0) + (df / 2.0) * math.log(df / 2.0) - math.lgamma(df / 2.0)
    s_max = 1.0 + 14.0 / math.sqrt(2.0 * df)  # mean 1, sd ≈ 1/sqrt(2 df): 14 sd out the density is < 1e-16
    n = points + (points % 2)  # Simpson needs an even number of intervals
    s = np.linspace(0.0, s_max, n + 1)[1:]  # s = 0: density 0 for df > 1, added below for df = 1
    dens = np.exp(const + (df - 1.0) * np.log(s) - df * s * s / 2.0)
    phi = np.frompyfunc(_phi, 1, 1)
    g = (phi(delta - t_crit * s) + phi(-delta - t_crit * s)).astype(float) * dens
    w = np.where(np.arange(1, n + 1) % 2 == 1, 4.0, 2.0)
    w[-1] = 1.0
    total = float(np.dot(g, w))
    if df == 1:  # the density at 0 is finite for df = 1: add its Simpson weight
        total += (_phi(delta) + _phi(-delta)) * math.exp(const)
    return total * s_max / n / 3.0


def min_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean paired difference a two-sided paired t-test at `alpha` detects with
    probability `power`, with `n` seeds whose per-seed differences have standard deviation `sd`."""
    if n < 2:
        raise ValueError(f"a paired t-test needs at least 2 seeds, got {n}")
    if not sd > 0:
        raise ValueError(f"the per-seed standard deviation must be > 0, got {sd}")
    df = n - 1
    t_crit = t_ppf(1.0 - alpha / 2.0, df)
    lo, hi = 0.0, 5.0
    while noncentral_t_power(hi, df, t_crit) < power:
        hi *= 2.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if noncentral_t_power(mid, df, t_crit) < power else (lo, mid)
    return (lo + hi) / 2 * sd / math.sqrt(n)


def paired_t_p(diffs: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test of "mean difference = 0" (nan with fewer than 2 values).

    Every seed exactly equal: p = 0 when that common difference is not 0 (nothing varies, and the
    difference is there every time), p = 1 when it is 0.
    """
    xs = [float(x) for x in diffs if x is not None and not math.isnan(x)]
    if len(xs) < 2:
        return float("nan")
    m, sd = statistics.fmean(xs), statistics.stdev(xs)
    if sd <= 1e-12 * max(1.0, abs(m)):
        return 1.0 if abs(m) <= 1e-12 else 0.0
    t = m / (sd / math.sqrt(len(xs)))
    return min(1.0, 2.0 * (1.0 - t_cdf(abs(t), len(xs) - 1)))


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given. A nan p (a row with fewer than two
    seeds) counts in the family as p = 1: leaving it out would loosen every other row's bar."""
    raw = [1.0 if p is None or math.isnan(p) else float(p) for p in ps]
    m = len(raw)
    order = sorted(range(m), key=lambda i: raw[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * raw[i]))
        out[i] = running
    return out
