"""Any reasoning-gym data set by name, or a weighted mixture of several (`data.source: reasoning_gym`).

    data:
      source: reasoning_gym
      tasks:
        - {name: countdown, weight: 2, config: {min_numbers: 3, max_numbers: 4}}
        - {name: basic_arithmetic, weight: 1}

The mixture is reasoning-gym's own `composite` data set (its DatasetSpec: name, weight, config), so
each item comes from one task drawn by weight and carries `metadata.source_dataset`. Each row's
`data_source` is that task's name, so the verifier scores it with reasoning-gym's checker for that
task (`reward: reasoning_gym`), which accepts any valid answer where a task has many.

Splits follow the same contract as the built-in tasks: ONE stream fills test, then validation,
then train, skipping every question already used, so the held-out splits are disjoint from
training and do not move when only `train_size` changes. Prompts ask for the answer in \\boxed{}
(verl's phrasing); the row's `target` is the reference answer boxed, for LUFFY-style guidance and
the SFT control.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from thinking_seeds.data.sources import _derived_seed, fill_splits

__all__ = ["INSTRUCTION", "build_reasoning_gym_splits"]

INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def _stream(tasks: Sequence[Any], seed: int, limit: int) -> Iterator[dict[str, Any]]:
    from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec

    specs = [DatasetSpec(name=t.name, weight=float(t.weight), config=dict(t.config)) for t in tasks]
    ds = CompositeDataset(CompositeConfig(size=limit, seed=_derived_seed(seed, "reasoning_gym/splits"), datasets=specs))
    for i in range(limit):
        yield ds[i]


def _row(entry: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    name = entry["metadata"]["source_dataset"]
    answer = str(entry["answer"])
    return {
        "data_source": name,
        "prompt": [{"role": "user", "content": f"{entry['question'].rstrip()}\n\n{INSTRUCTION}"}],
        "ability": "reasoning",
        "reward_model": {"style": "rule", "ground_truth": answer},
        # default=str: a few tasks keep non-JSON values (tuples are fine, sets are not) in metadata
        "extra_info": {"split": split, "index": index, "rg_entry": json.dumps(entry, sort_keys=True, default=str)},
        "target": f"\\boxed{{{answer}}}",
    }


def build_reasoning_gym_splits(
    out_dir: str | os.PathLike[str], tasks: Sequence[Any], train_size: int, val_size: int, test_size: int, seed: int
) -> dict[str, Path]:
    """Write train/validation/test Parquet files (DATASET_SCHEMA) of the mixture; return {split: path}."""
    sizes = {"test": test_size, "validation": val_size, "train": train_size}
    total = sum(sizes.values())
    limit = 3 * total + 1000
    return fill_splits(
        out_dir,
        sizes,
        _stream(tasks, seed, limit),
        key=lambda e: (e["metadata"]["source_dataset"], e["question"]),
        row=_row,
        shortage=lambda found: (
            f"data.tasks: only {found} distinct questions in {limit} draws of {', '.join(t.name for t in tasks)}, but "
            f"{total} were asked for; lower data.train_size / val_size / test_size or widen the tasks' configs"
        ),
    )
