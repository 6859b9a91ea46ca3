"""24-game data sets: verl-schema splits disjoint by multiset, and the supervised warm-up corpus.

The 1,362 solvable multisets (`game24.solvable_multisets`) are shuffled once by `seed` and fill test,
then validation, then train (`sources.fill_splits`), so the held-out splits do not move when only
`train_size` changes and every multiset lies in one split at most. The question lists the numbers in
a seeded random order. The warm-up corpus draws only from multisets outside `exclude` (the held-out
keys), i.e. the training split: each pair is a random multiset, a random order of its numbers, and a
uniformly drawn solution among all its chain-step solutions (`game24.solutions`), so the base model
has seen the many ways a problem can be solved.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from thinking_seeds.data.countdown_data import problem_key
from thinking_seeds.data.game24 import TARGET, chain_text, question, solutions, solvable_multisets
from thinking_seeds.data.sources import _derived_seed, fill_splits

__all__ = ["DATA_SOURCE", "build_game24_splits", "game24_warmup_corpus"]

# reasoning-gym's countdown checker scores the rows (not puzzle24's: see game24's docstring).
DATA_SOURCE = "countdown"


def _row(ms: tuple[int, ...], split: str, index: int, rng: random.Random) -> dict[str, Any]:
    numbers = list(ms)
    rng.shuffle(numbers)
    answer = chain_text(numbers, rng.choice(solutions(numbers)))
    expression = answer.rsplit("\\boxed{", 1)[1][:-1]
    rg_entry = {"answer": expression, "metadata": {"numbers": numbers, "target": TARGET}}
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question(numbers, TARGET)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": expression},
        "extra_info": {"split": split, "index": index, "rg_entry": json.dumps(rg_entry, sort_keys=True)},
        "target": answer,
    }


def build_game24_splits(
    out_dir: str | os.PathLike[str], train_size: int, val_size: int, test_size: int, seed: int
) -> dict[str, Path]:
    """Write train/validation/test Parquet files (DATASET_SCHEMA) and return {split: path}.

    `train_size` is a cap: the problem space is finite, so the training split holds at most the
    1,362 - test_size - val_size multisets the held-out splits leave (978 at the defaults)."""
    left = len(solvable_multisets()) - test_size - val_size
    if left < 1:
        raise ValueError(
            f"game24: data.test_size + val_size = {test_size + val_size} leaves no training multisets of the "
            f"{len(solvable_multisets())} solvable ones; lower data.val_size / test_size"
        )
    multisets = solvable_multisets()
    random.Random(_derived_seed(seed, "game24/splits")).shuffle(multisets)
    rng = random.Random(_derived_seed(seed, "game24/rows"))
    stream = ({"ms": m} for m in multisets)
    return fill_splits(
        out_dir,
        {"test": test_size, "validation": val_size, "train": min(train_size, left)},
        stream,
        key=lambda e: e["ms"],
        row=lambda e, split, i: _row(e["ms"], split, i, rng),
        shortage=lambda found: f"game24: only {found} solvable multisets (cannot happen: the sizes were capped)",
    )


def game24_warmup_corpus(n: int, seed: int, exclude: set[str]) -> list[tuple[str, str]]:
    """n (question, worked solution) pairs over the solvable multisets whose key is not in `exclude`."""
    pool = [m for m in solvable_multisets() if problem_key(list(m), TARGET) not in exclude]
    if not pool:
        raise ValueError(f"game24 warm-up corpus: every solvable multiset is in `exclude` ({len(exclude)} keys)")
    rng = random.Random(_derived_seed(seed, "game24/warmup"))
    out: list[tuple[str, str]] = []
    for _ in range(n):
        numbers = list(rng.choice(pool))
        rng.shuffle(numbers)
        out.append((question(numbers, TARGET), chain_text(numbers, rng.choice(solutions(numbers)))))
    return out
