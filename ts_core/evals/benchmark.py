"""Scores of n samples per prompt on a user's benchmark, per data source: avg@n, pass@k and maj@k.

    metrics = benchmark_metrics(samples, n, classes)   # {"metrics": {...}, "by_source": {source: {...}}}

- avg@n: the mean reward over all samples (verl's mean@N), each prompt weighing the same.
- pass@k: the unbiased estimator (thinking_seeds.algo.metrics.pass_at_k) with a sample correct when
  the verifier says `ok` (full credit: a partial or format credit is not a solve).
- maj@k: the majority answer's correctness over k of the n samples, answers grouped by
  math-verify equivalence (thinking_seeds.evals.majority).

k runs over the powers of two up to n, and n. One group of metrics per `data_source` and one over
all prompts; counts (prompts, samples, statuses) are integers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from thinking_seeds.algo.metrics import pass_at_k
from thinking_seeds.evals.majority import PairCheck, answer_classes, maj_at_k

__all__ = ["ScoredSample", "benchmark_metrics", "ks_upto", "math_verify_pairs"]


@dataclass(frozen=True)
class ScoredSample:
    """One verified sample of a prompt (samples of a prompt are consecutive, in sample order)."""

    prompt_id: str
    data_source: str
    answer: str | None  # the parsed answer (last \\boxed{}); None: none
    reward: float
    status: str
    response_len: int = 0


def ks_upto(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else [*ks, n]


def _group(rows: list[list[ScoredSample]], classes: list[list[int | None]], n: int) -> dict:
    ks = ks_upto(n)
    correct = [[1.0 if s.status == "ok" else 0.0 for s in r] for r in rows]
    statuses = Counter(s.status for r in rows for s in r)
    P = len(rows)
    out: dict = {
        "prompts": P,
        "samples": P * n,
        f"avg@{n}": sum(sum(s.reward for s in r) / n for r in rows) / P,
    }
    out.update({f"pass@{k}": sum(pass_at_k(n, int(sum(c)), k) for c in correct) / P for k in ks})
    out.update({f"maj@{k}": sum(maj_at_k(cl, c, k) for cl, c in zip(classes, correct, strict=True)) / P for k in ks})
    out["mean_response_len"] = sum(s.response_len for r in rows for s in r) / (P * n)
    out["status"] = dict(sorted(statuses.items()))
    return out


def benchmark_metrics(samples: Sequence[ScoredSample], n: int, equal: PairCheck) -> dict:
    """{"metrics": <all prompts>, "by_source": {data_source: <its prompts>}} for n samples per prompt.

    `equal` decides answer equivalence for maj@k (`math_verify_pairs(verifier)` in practice).
    """
    if n < 1 or not samples or len(samples) % n:
        raise ValueError(f"benchmark_metrics needs n >= 1 samples per prompt, got {len(samples)} samples for n={n}")
    rows = [list(samples[i : i + n]) for i in range(0, len(samples), n)]
    for r in rows:
        if len({s.prompt_id for s in r}) != 1:
            ids = [s.prompt_id for s in r]
            raise ValueError(f"benchmark_metrics: samples {ids} mix prompts; keep each prompt's n samples together")
    classes = answer_classes([[s.answer for s in r] for r in rows], equal)
    by_source = {}
    for src in sorted({r[0].data_source for r in rows}):
        idx = [i for i, r in enumerate(rows) if r[0].data_source == src]
        by_source[src] = _group([rows[i] for i in idx], [classes[i] for i in idx], n)
    return {"metrics": _group(rows, classes, n), "by_source": by_source}


def math_verify_pairs(verifier) -> PairCheck:
    """A PairCheck that asks a math-verify Verifier (its worker pool, each check under its time limit)
    whether `candidate` equals `reference`: the reference plays the ground truth. A check that times
    out or fails counts as "not equal" (the answers then vote apart)."""
    from thinking_seeds.data.sources import Message, Prompt

    def check(pairs: list[tuple[str, str]]) -> list[bool]:
        prompts = [
            Prompt(prompt_id=f"pair-{i}", messages=(Message("user", ""),), ground_truth=ref, data_source="maj")
            for i, (ref, _) in enumerate(pairs)
        ]
        verdicts = verifier.score_batch([f"\\boxed{{{cand}}}" for _, cand in pairs], prompts)
        return [v.status == "ok" for v in verdicts]

    return check
