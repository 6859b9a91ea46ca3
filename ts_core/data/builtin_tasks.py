"""The built-in tasks (`data.source`), each one record: how to build its splits and warm-up corpus,
which verifier scores it, and what label measures the diversity of its answers.

    chain_sum   the fast demo (one answer per prompt; `a`/`b` strategy share as a cheap diversity label)
    countdown   the multi-solution testbed of issue #9 (+/- countdown; the sign pattern of a correct
                answer as its solution label)
    game24      the 24 game (issue #26: the continuation decides; the order-free expression as label)

A user's own verl Parquet (`data.source: parquet`) has none of this: it is copied in as is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from thinking_seeds.config import DataConfig
from thinking_seeds.data import chain_sum, countdown, game24
from thinking_seeds.data.countdown_data import build_countdown_splits, countdown_keys_of, countdown_warmup_corpus
from thinking_seeds.data.game24_data import build_game24_splits, game24_warmup_corpus
from thinking_seeds.data.rg_data import build_reasoning_gym_splits
from thinking_seeds.data.sources import build_chain_sum_splits, expressions_of, warmup_corpus
from thinking_seeds.data.verdicts import last_boxed

__all__ = ["BUILTIN_TASKS", "BuiltinTask", "build_splits", "get_task"]


@dataclass(frozen=True)
class BuiltinTask:
    name: str
    charset: str
    reward: str  # verifier backend (rewards.BACKENDS)
    build_splits: Callable[[Path, DataConfig], dict[str, Path]]
    held_out_keys: Callable[[Path], set[str]]  # problem keys of a split file
    warmup_corpus: Callable[[int, int, set[str], DataConfig], list[tuple[str, str]]]
    # (response text, reward) -> the label whose distribution is the task's diversity measure;
    # None = not counted (e.g. a wrong countdown answer has no solution pattern).
    label: Callable[[str, float], str | None]


def _chain_sum_splits(out: Path, d: DataConfig) -> dict[str, Path]:
    return build_chain_sum_splits(
        out, d.train_size, d.val_size, d.test_size, d.seed, d.min_terms, d.max_terms, d.min_digits, d.max_digits
    )


def _chain_sum_corpus(n: int, seed: int, exclude: set[str], d: DataConfig) -> list[tuple[str, str]]:
    return warmup_corpus(
        n,
        seed,
        exclude,
        mix=0.5,
        min_terms=d.min_terms,
        max_terms=d.max_terms,
        min_digits=d.min_digits,
        max_digits=d.max_digits,
    )


def _countdown_label(text: str, reward: float) -> str | None:
    return countdown.signature(last_boxed(text)) if reward >= 1.0 else None


def _game24_label(text: str, reward: float) -> str | None:
    return game24.canonical(last_boxed(text)) if reward >= 1.0 else None


BUILTIN_TASKS: dict[str, BuiltinTask] = {
    "chain_sum": BuiltinTask(
        "chain_sum",
        chain_sum.CHARSET,
        "math_verify",
        _chain_sum_splits,
        expressions_of,
        _chain_sum_corpus,
        lambda text, reward: chain_sum.strategy_of(text),
    ),
    "countdown": BuiltinTask(
        "countdown",
        countdown.CHARSET,
        "reasoning_gym",
        lambda out, d: build_countdown_splits(out, d.train_size, d.val_size, d.test_size, d.seed),
        countdown_keys_of,
        lambda n, seed, exclude, d: countdown_warmup_corpus(n, seed, exclude),
        _countdown_label,
    ),
    # Same held-out keys and checker as countdown (the rows are reasoning-gym countdown entries).
    "game24": BuiltinTask(
        "game24",
        game24.CHARSET,
        "reasoning_gym",
        lambda out, d: build_game24_splits(out, d.train_size, d.val_size, d.test_size, d.seed),
        countdown_keys_of,
        lambda n, seed, exclude, d: game24_warmup_corpus(n, seed, exclude),
        _game24_label,
    ),
}


def build_splits(out: Path, d: DataConfig) -> dict[str, Path]:
    """The train/validation/test files of a generated source: a built-in task or a reasoning-gym mixture."""
    if d.source == "reasoning_gym":
        return build_reasoning_gym_splits(out, d.tasks, d.train_size, d.val_size, d.test_size, d.seed)
    return get_task(d.source).build_splits(out, d)


def get_task(source: str) -> BuiltinTask:
    try:
        return BUILTIN_TASKS[source]
    except KeyError:
        raise ValueError(
            f"data.source={source!r} is not a built-in task; known: {', '.join(BUILTIN_TASKS)} "
            "(or data.source=parquet with your own files)"
        ) from None
