"""Data sets: chain_sum splits in verl's Parquet layout, the warm-up corpus, and a loader.

`build_chain_sum_splits` draws from ONE reasoning-gym stream and fills test, then validation,
then train, skipping every compact expression already used: the splits are disjoint (and free
of duplicates), and the held-out splits do not change when only `train_size` changes.

`load_dataset` (re-exported from `dataset_file.py`) reads any verl-schema Parquet file (ours or a
user's) into `Prompt`s (`prompts.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from thinking_seeds.data.chain_sum import compact, question, solution
from thinking_seeds.data.dataset_file import check_user_data, load_dataset
from thinking_seeds.data.prompts import Message, Prompt
from thinking_seeds.store.parquet_io import DataError, write_table_atomic
from thinking_seeds.store.schemas import DATASET_SCHEMA

__all__ = [
    "SPLITS",
    "Message",
    "Prompt",
    "build_chain_sum_splits",
    "fill_splits",
    "check_user_data",
    "expressions_of",
    "load_dataset",
    "warmup_corpus",
]

# Split name -> file name; the fill order puts held-out splits first (see module docstring).
SPLITS: dict[str, str] = {"test": "test.parquet", "validation": "validation.parquet", "train": "train.parquet"}
DATA_SOURCE = "chain_sum"


def _derived_seed(seed: int, stream: str) -> int:
    # reasoning-gym seeds item i with Random(seed + i): user seeds 0 and 1 would give the same
    # items shifted by one. Hashing spreads user seeds (and our streams) far apart.
    digest = hashlib.sha256(f"thinking-seeds/{stream}/{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _rg_stream(name: str, seed: int, stream: str, limit: int, **config: Any) -> Iterator[dict[str, Any]]:
    """The first `limit` items of reasoning-gym data set `name`, a deterministic stream of (seed, stream)."""
    import reasoning_gym  # heavy import (~0.8 s): only the builders need it

    ds = reasoning_gym.create_dataset(name, size=limit, seed=_derived_seed(seed, stream), **config)
    for i in range(limit):
        yield ds[i]


def _row(entry: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    expr = compact(entry["metadata"]["expression"])
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question(expr)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": entry["answer"]},
        "extra_info": {"split": split, "index": index, "rg_entry": json.dumps(entry, sort_keys=True)},
        "target": solution(expr, "a"),
    }


def build_chain_sum_splits(
    out_dir: str | os.PathLike[str],
    train_size: int,
    val_size: int,
    test_size: int,
    seed: int,
    min_terms: int = 3,
    max_terms: int = 5,
    min_digits: int = 1,
    max_digits: int = 2,
) -> dict[str, Path]:
    """Write train/validation/test Parquet files (DATASET_SCHEMA) and return {split: path}.

    No compact expression appears twice anywhere in the three files. Same arguments -> same
    bytes. Raises ValueError when the expression space of the given term/digit ranges is too
    small to supply that many distinct expressions.
    """
    sizes = {"test": test_size, "validation": val_size, "train": train_size}
    for split, n in sizes.items():
        if n < 0:
            raise ValueError(f"{split} size must be >= 0, got {n}")
    total = sum(sizes.values())
    # Collisions are rare for the default ranges (~3% of 10k draws); 4x + 1000 draws is ample,
    # and running out means the space itself is too small, which we report.
    limit = 4 * total + 1000
    terms = dict(min_terms=min_terms, max_terms=max_terms, min_digits=min_digits, max_digits=max_digits)
    return fill_splits(
        out_dir,
        sizes,
        _rg_stream(DATA_SOURCE, seed, "splits", limit, **terms),
        key=lambda e: compact(e["metadata"]["expression"]),
        row=_row,
        shortage=lambda found: (
            f"chain_sum: found only {found} distinct expressions in {limit} draws, but "
            f"{total} were asked for (train {train_size}, validation {val_size}, test {test_size}) "
            f"with terms {min_terms}-{max_terms}, digits {min_digits}-{max_digits}; lower the "
            "sizes or widen the term/digit ranges"
        ),
    )


def fill_splits(
    out_dir: str | os.PathLike[str],
    sizes: dict[str, int],
    stream: Iterator[dict[str, Any]],
    key: Callable[[dict[str, Any]], Hashable],
    row: Callable[[dict[str, Any], str, int], dict[str, Any]],
    shortage: Callable[[int], str],
) -> dict[str, Path]:
    """The split contract every generated task shares: ONE stream fills test, then validation, then
    train, skipping every entry whose `key` was already used, so the splits are disjoint and the
    held-out splits do not move when only the train size changes. `row(entry, split, index)` makes
    the verl row; `shortage(found)` is the error text when the stream runs out. Writes the three
    files (DATASET_SCHEMA) atomically and returns {split: path} in train/validation/test order."""
    rows: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    seen: set[Hashable] = set()
    for split in [s for s in SPLITS for _ in range(sizes[s])]:
        for entry in stream:
            k = key(entry)
            if k not in seen:
                seen.add(k)
                rows[split].append(row(entry, split, len(rows[split])))
                break
        else:
            raise ValueError(shortage(len(seen)))
    out = Path(out_dir)
    paths = {
        split: write_table_atomic(
            pa.Table.from_pylist(rows[split], schema=DATASET_SCHEMA), out / name, schema=DATASET_SCHEMA
        )
        for split, name in SPLITS.items()
    }
    return {s: paths[s] for s in ("train", "validation", "test")}


def expressions_of(path: str | os.PathLike[str]) -> set[str]:
    """Compact expressions of a chain_sum split file (to pass as `exclude` to warmup_corpus)."""
    out: set[str] = set()
    for p in load_dataset(path):
        if p.rg_entry is None:
            raise DataError(f"{path}: row {p.prompt_id} has no extra_info.rg_entry; not a chain_sum split")
        out.add(compact(json.loads(p.rg_entry)["metadata"]["expression"]))
    return out


def warmup_corpus(
    n: int,
    seed: int,
    exclude: set[str],
    mix: float = 0.5,
    *,
    min_terms: int = 3,
    max_terms: int = 5,
    min_digits: int = 1,
    max_digits: int = 2,
) -> list[tuple[str, str]]:
    """n (question, worked solution) pairs for the supervised warm-up.

    Expressions in `exclude` (compact form, e.g. from `expressions_of` on the held-out splits)
    are skipped; repeats among the n are allowed, as in any sampled corpus. Exactly
    round(n * mix) solutions use strategy 'b', the rest 'a', at seeded random positions.
    """
    if not 0.0 <= mix <= 1.0:
        raise ValueError(f"mix is the share of strategy 'b' and must be in [0, 1], got {mix}")
    pick = random.Random(_derived_seed(seed, "warmup-strategy"))
    b_positions = set(pick.sample(range(n), round(n * mix)))
    limit = 4 * n + 1000
    out: list[tuple[str, str]] = []
    terms = dict(min_terms=min_terms, max_terms=max_terms, min_digits=min_digits, max_digits=max_digits)
    for entry in _rg_stream(DATA_SOURCE, seed, "warmup", limit, **terms):
        if len(out) == n:
            break
        expr = compact(entry["metadata"]["expression"])
        if expr in exclude:
            continue
        out.append((question(expr), solution(expr, "b" if len(out) in b_positions else "a")))
    if len(out) < n:
        raise ValueError(
            f"warmup_corpus: only {len(out)} of {n} expressions in {limit} draws are outside "
            f"`exclude` ({len(exclude)} expressions); widen the term/digit ranges or exclude fewer"
        )
    return out
