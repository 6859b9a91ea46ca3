"""countdown (+/-) data sets: verl-schema splits and the supervised warm-up corpus.

Same contract as the chain_sum builders in `thinking_seeds.data.sources`: ONE reasoning-gym stream fills test,
then validation, then train, skipping every problem already used (a problem is its numbers as a
multiset plus its target, so a shuffled copy counts as the same), so the splits are disjoint and
the held-out splits do not change when only `train_size` changes. The warm-up corpus comes from
another stream and skips the held-out problems.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from thinking_seeds.data.countdown import GEN_CONFIG, numbers_target, question, random_solution
from thinking_seeds.data.sources import _derived_seed, _rg_stream, fill_splits, load_dataset
from thinking_seeds.store.parquet_io import DataError

__all__ = ["DATA_SOURCE", "build_countdown_splits", "countdown_keys_of", "countdown_warmup_corpus", "problem_key"]

DATA_SOURCE = "countdown"  # reasoning-gym's name: the verifier scores with its countdown checker


def problem_key(numbers: list[int], target: int) -> str:
    return f"{','.join(str(n) for n in sorted(numbers))}->{target}"


def _row(entry: dict[str, Any], split: str, index: int, rng: random.Random) -> dict[str, Any]:
    numbers, target = numbers_target(entry)
    # Only what the checker reads is kept in rg_entry: the numbers and the target.
    rg_entry = {"answer": entry["answer"], "metadata": {"numbers": numbers, "target": target}}
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question(numbers, target)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": entry["answer"]},
        "extra_info": {"split": split, "index": index, "rg_entry": json.dumps(rg_entry, sort_keys=True)},
        "target": random_solution(numbers, target, rng),
    }


def build_countdown_splits(
    out_dir: str | os.PathLike[str], train_size: int, val_size: int, test_size: int, seed: int
) -> dict[str, Path]:
    """Write train/validation/test Parquet files (DATASET_SCHEMA) and return {split: path}."""
    sizes = {"test": test_size, "validation": val_size, "train": train_size}
    total = sum(sizes.values())
    limit = 2 * total + 1000
    rng = random.Random(_derived_seed(seed, "countdown/targets"))  # the worked solutions' choices
    return fill_splits(
        out_dir,
        sizes,
        _rg_stream(DATA_SOURCE, seed, "countdown/splits", limit, **GEN_CONFIG),
        key=lambda e: problem_key(*numbers_target(e)),
        row=lambda e, split, i: _row(e, split, i, rng),
        shortage=lambda found: (
            f"countdown: found only {found} distinct problems in {limit} draws, but {total} "
            "were asked for; lower data.train_size / val_size / test_size"
        ),
    )


def countdown_keys_of(path: str | os.PathLike[str]) -> set[str]:
    """Problem keys of a countdown split file (to pass as `exclude` to the warm-up corpus)."""
    out: set[str] = set()
    for p in load_dataset(path):
        if p.rg_entry is None:
            raise DataError(f"{path}: row {p.prompt_id} has no extra_info.rg_entry; not a countdown split")
        out.add(problem_key(*numbers_target(json.loads(p.rg_entry))))
    return out


def countdown_warmup_corpus(n: int, seed: int, exclude: set[str]) -> list[tuple[str, str]]:
    """n (question, worked solution) pairs; each solution is a uniformly drawn valid sign pattern in
    a uniformly drawn order (so the base model knows every way a prompt can be solved)."""
    rng = random.Random(_derived_seed(seed, "countdown/warmup-solutions"))
    out: list[tuple[str, str]] = []
    limit = 2 * n + 1000
    for entry in _rg_stream(DATA_SOURCE, seed, "countdown/warmup", limit, **GEN_CONFIG):
        if len(out) == n:
            break
        numbers, target = numbers_target(entry)
        if problem_key(numbers, target) in exclude:
            continue
        out.append((question(numbers, target), random_solution(numbers, target, rng)))
    if len(out) < n:
        raise ValueError(
            f"countdown warm-up corpus: only {len(out)} of {n} problems in {limit} draws are outside "
            f"`exclude` ({len(exclude)} problems)"
        )
    return out
