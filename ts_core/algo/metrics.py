"""Evaluation and diagnostic metrics (docs/algorithm.md §5): pass@k, avg@k, token entropy, effective entropy,
distinct-n and strategy share.

Convention for empty populations: a mean over nothing is NaN, not 0. A run without seeded samples
has no "prefix entropy", and a 0 would read as "entropy collapsed to zero". Loggers should keep the
NaN (or drop the key); never average it in.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a tensor is touched: pass@k users (reports) stay light
    import torch

__all__ = [
    "avg_at_k",
    "distinct_n",
    "effective_entropy",
    "masked_mean",
    "pass_at_k",
    "pass_at_k_curve",
    "strategy_share",
    "token_entropy",
]


# --- accuracy ---------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k).

    Computed in the Codex paper's product form 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms
    the binomials (they overflow floats for n in the hundreds).
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"pass_at_k takes integers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(
            f"pass_at_k needs 1 <= k <= n, got k={k} with n={n} samples; "
            f"sample at least k responses per prompt or drop k from the curve"
        )
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_curve(correct_counts: Sequence[int], n: int, ks: Iterable[int]) -> dict[int, float]:
    """Mean pass@k over prompts for each k. correct_counts[p] = correct samples of prompt p (of n)."""
    counts = [int(c) for c in correct_counts]
    if not counts:
        raise ValueError("pass_at_k_curve got no prompts (correct_counts is empty)")
    return {k: sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}


def avg_at_k(rewards: torch.Tensor | Sequence[Sequence[float]]) -> float:
    """avg@k: mean over prompts of the mean reward of each prompt's k samples.

    Args:
        rewards: (P, k) tensor, or one sequence of rewards per prompt (k may vary per prompt;
            each prompt then still weighs the same).
    """
    rows = rewards.tolist() if hasattr(rewards, "tolist") else [list(r) for r in rewards]
    if not rows:
        raise ValueError("avg_at_k got no prompts")
    empty = [p for p, r in enumerate(rows) if not isinstance(r, list) or len(r) == 0]
    if empty:
        raise ValueError(f"avg_at_k needs a non-empty list of rewards per prompt; prompts {empty[:10]} have none")
    return sum(sum(r) / len(r) for r in rows) / len(rows)


# --- entropy ----------------------------------------------------------------


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) over the last dim: (..., V) -> (...).

    From log_softmax, in float32 or wider, so large logits neither overflow nor lose the small
    probabilities. Logits of -inf (top-k / top-p masking) contribute 0, as p·log p -> 0.
    """
    import torch

    x = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    logp = torch.log_softmax(x, dim=-1)
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(dim=-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of x where mask is True (over all elements, or along `dim`); NaN where mask is empty.

    Masked-out positions are dropped, not multiplied by 0, so a NaN/inf there (padding) cannot leak.
    """
    if mask.shape != x.shape:
        raise ValueError(f"masked_mean: mask shape {tuple(mask.shape)} != x shape {tuple(x.shape)}")
    m = mask.bool()
    import torch

    kept = torch.where(m, x, 0)
    total, count = (kept.sum(), m.sum()) if dim is None else (kept.sum(dim), m.sum(dim))
    return total / count  # 0/0 -> NaN: an empty population has no mean


def effective_entropy(entropy: torch.Tensor, mask: torch.Tensor, unclipped_mask: torch.Tensor) -> torch.Tensor:
    """Mean token entropy over tokens that carry gradient: in `mask` and not clipped (docs/algorithm.md §5).

    Args:
        entropy: (B, T) token entropy (see `token_entropy`).
        mask: (B, T) bool, the population (e.g. response_mask, or response & ~prefix).
        unclipped_mask: (B, T) bool, True where the clip did not zero the token's gradient.
    Returns:
        scalar tensor; NaN if no token carries gradient.
    """
    if unclipped_mask.shape != mask.shape:
        raise ValueError(
            f"effective_entropy: unclipped_mask shape {tuple(unclipped_mask.shape)} != mask shape {tuple(mask.shape)}"
        )
    return masked_mean(entropy, mask.bool() & unclipped_mask.bool())


# --- diversity --------------------------------------------------------------


def distinct_n(texts: Iterable[str | Sequence[Hashable]], n: int) -> float:
    """Distinct n-grams / total n-grams, pooled over all texts.

    A str is a character sequence; pass token-id lists for token n-grams. Texts shorter than n
    contribute nothing; with no n-gram at all the result is NaN (undefined, not "no diversity").
    """
    if n < 1:
        raise ValueError(f"distinct_n needs n >= 1, got {n}")
    grams: Counter[tuple] = Counter()
    for seq in texts:
        s = tuple(seq)
        grams.update(s[i : i + n] for i in range(len(s) - n + 1))
    total = sum(grams.values())
    return len(grams) / total if total else math.nan


def strategy_share(labels: Iterable[Hashable]) -> dict[Hashable, float]:
    """Fraction of samples per label (e.g. the chain_sum strategy token), largest share first."""
    counts = Counter(labels)
    total = sum(counts.values())
    return {label: c / total for label, c in counts.most_common()}
