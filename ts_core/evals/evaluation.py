"""Held-out evaluation: sample n answers per prompt, verify them, report avg@n and pass@k.

Also used for the *explorable solution space* (docs/algorithm.md §5): the same prompts sampled plainly and
from historical seeds (prefix + current continuation) give two pass@k curves.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TextIO

from thinking_seeds.algo.metrics import pass_at_k_curve
from thinking_seeds.data.chain_sum import strategy_of
from thinking_seeds.engine.models import encode_prompt
from thinking_seeds.engine.rollout import SamplingParams
from thinking_seeds.evals.benchmark import ks_upto


@dataclass
class EvalResult:
    n: int
    accuracy: float  # avg@n: mean reward over all samples
    pass_at_k: dict[int, float]
    correct_counts: list[int]
    status_counts: dict[str, int]
    strategy_share: dict[str, float]
    distinct_correct_answers: float  # mean number of distinct correct *solutions* (texts) per prompt
    mean_response_len: float
    samples: list[dict] = field(default_factory=list, repr=False)
    # With a task label (e.g. countdown's sign pattern of a correct answer), per prompt:
    # distinct labels found and the entropy (nats) of their distribution; means over prompts.
    distinct_labels: float | None = None
    label_entropy: float | None = None  # mean over prompts with at least one labelled sample
    per_prompt: list[dict] = field(default_factory=list, repr=False)

    def flat(self, prefix: str = "eval") -> dict[str, float]:
        out = {
            f"{prefix}/accuracy": self.accuracy,
            f"{prefix}/mean_response_len": self.mean_response_len,
            f"{prefix}/distinct_correct_solutions": self.distinct_correct_answers,
        }
        out.update({f"{prefix}/pass@{k}": v for k, v in self.pass_at_k.items()})
        out.update({f"{prefix}/strategy_{s}": v for s, v in self.strategy_share.items()})
        if self.distinct_labels is not None:
            out[f"{prefix}/distinct_patterns"] = self.distinct_labels
            out[f"{prefix}/pattern_entropy"] = float(self.label_entropy or 0.0)
        out.update({f"{prefix}/status_{s}": float(c) for s, c in self.status_counts.items()})
        return out


class ProgressLines:
    """`evaluate θ_4: 410/1024 samples (40%), 3.1 s` each time another tenth of a call's samples is
    done: whole lines, never a carriage return, so a piped or logged evaluation shows them as well."""

    def __init__(self, what: str, total: int, out: TextIO | None = None) -> None:
        self.what, self.total, self.out = what, total, out
        self.t0, self.shown = time.perf_counter(), 0

    def __call__(self, done: int) -> None:
        tenth = done * 10 // max(1, self.total)
        if tenth <= self.shown:
            return
        self.shown = tenth
        print(
            f"{self.what}: {done}/{self.total} samples ({100 * done // max(1, self.total)}%), "
            f"{time.perf_counter() - self.t0:.1f} s",
            file=self.out or sys.stderr,
            flush=True,
        )


def _no_timer(_: str) -> AbstractContextManager:
    return contextlib.nullcontext()


def _generate(engine, contexts, params, caps, progress: Callable[[int], None] | None):
    """engine.generate, reporting progress where the engine can (the HF engine, after each batch)."""
    if progress is not None and "progress" in inspect.signature(engine.generate).parameters:
        return engine.generate(contexts, params, max_new=caps, progress=progress)
    gens = engine.generate(contexts, params, max_new=caps)
    if progress is not None:
        progress(len(gens))
    return gens


def evaluate_prompts(
    engine,
    tokenizer,
    prompts: Sequence,
    verifier,
    *,
    n: int,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    prefixes: Sequence[Sequence[int]] | None = None,
    keep_samples: bool = False,
    label: Callable[[str, float], str | None] | None = None,
    timer: Callable[[str], AbstractContextManager] = _no_timer,
    part: str = "",
    progress: str | None = None,
) -> EvalResult:
    """Sample n responses per prompt (optionally each continuing `prefixes[i*n + j]`) and score them.

    `label(text, reward)`: the task's solution label (None: chain_sum's strategy share instead);
    gives per-prompt distinct labels and label entropy, and `per_prompt` rows for every prompt.
    `timer(name)` times `<part>generation` (sampling) and `<part>verification` (decoding and scoring);
    `progress` names the evaluation in the progress lines (ProgressLines, on stderr; None: silent).
    """
    contexts, owners = [], []
    for i, p in enumerate(prompts):
        ids = encode_prompt(tokenizer, p.chat())
        for j in range(n):
            pre = list(prefixes[i * n + j]) if prefixes is not None else []
            contexts.append(ids + pre)
            owners.append((i, pre))
    # A seeded response is prefix + continuation, capped at max_new_tokens in total.
    caps = [max(0, max_new_tokens - len(pre)) for _, pre in owners]
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed, feed_context=True)
    lines = ProgressLines(progress, len(contexts)) if progress else None
    with timer(f"{part}generation"):
        gens = _generate(engine, contexts, params, caps, lines)
    with timer(f"{part}verification"):
        texts = [
            tokenizer.decode(pre + g.token_ids, skip_special_tokens=True)
            for (i, pre), g in zip(owners, gens, strict=True)
        ]
        verdicts = verifier.score_batch(texts, [prompts[i] for i, _ in owners])

    correct = [0] * len(prompts)
    solutions: list[set[str]] = [set() for _ in prompts]
    for (i, _), v, t in zip(owners, verdicts, texts, strict=True):
        if v.reward > 0:
            correct[i] += 1
            solutions[i].add(t.strip())
    total = max(1, len(texts))
    per_prompt = [{"prompt_id": p.prompt_id, "n": n, "correct": c} for p, c in zip(prompts, correct, strict=True)]
    distinct = entropy = None
    if label is None:
        strategies = Counter(strategy_of(t) for t in texts)
        strategy = {s: strategies.get(s, 0) / total for s in ("a", "b", "other")}
    else:
        strategy = {}
        labels: list[list[str]] = [[] for _ in prompts]
        for (i, _), v, t in zip(owners, verdicts, texts, strict=True):
            lab = label(t, v.reward)
            if lab is not None:
                labels[i].append(lab)
        for row, labs in zip(per_prompt, labels, strict=True):
            row["distinct_labels"] = len(set(labs))
            row["label_entropy"] = label_entropy_of(labs)
        distinct = sum(r["distinct_labels"] for r in per_prompt) / max(1, len(prompts))
        found = [r["label_entropy"] for r, labs in zip(per_prompt, labels, strict=True) if labs]
        entropy = sum(found) / len(found) if found else 0.0
    samples = []
    if keep_samples:
        samples = [
            {
                "prompt_id": prompts[i].prompt_id,
                "data_source": prompts[i].data_source,
                "text": t,
                "answer": v.answer,
                "reward": v.reward,
                "status": v.status,
                "response_len": len(pre) + len(g.token_ids),
            }
            for (i, pre), t, v, g in zip(owners, texts, verdicts, gens, strict=True)
        ]
    return EvalResult(
        n=n,
        accuracy=sum(v.reward for v in verdicts) / total,
        pass_at_k=pass_at_k_curve(correct, n, ks_upto(n)),
        correct_counts=correct,
        status_counts=dict(Counter(v.status for v in verdicts)),
        strategy_share=strategy,
        distinct_correct_answers=sum(len(s) for s in solutions) / max(1, len(prompts)),
        mean_response_len=sum(len(pre) + len(g.token_ids) for (_, pre), g in zip(owners, gens, strict=True)) / total,
        samples=samples,
        distinct_labels=distinct,
        label_entropy=entropy,
        per_prompt=per_prompt,
    )


def label_entropy_of(labels: Sequence[str]) -> float:
    """Shannon entropy (nats) of a list of labels' empirical distribution (0 for none)."""
    counts = Counter(labels)
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values()) if total else 0.0
