"""The update's input: one iteration's rollouts (with advantages) as per-sequence Python lists.

The trainer never sees rewards, only advantages (prime-rl's split). Tensors are built per
micro-batch (train/micro_loss.py), so a `Batch` stays small and cheap to select from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.schemas import ROLLOUT_OPTIONAL_COLUMNS, ROLLOUT_SCHEMA


@dataclass
class Batch:
    """Per-sequence training data, as Python lists (small; tensors are built per micro-batch)."""

    contexts: list[list[int]]
    responses: list[list[int]]
    old_logprobs: list[list[float]]
    behaviour_logprobs: list[list[float]]
    prefix_len: list[int]
    seeded: list[bool]
    advantages: list[float]
    source_age: list[int]  # iterations between the seed's writer and θ_k; -1 for on-policy samples
    token_weights: list[list[float]]  # loss.rollout_correction's per-token weights; [] = all 1

    def __len__(self) -> int:
        return len(self.responses)

    def select(self, idx: list[int]) -> Batch:
        return Batch(*[[getattr(self, f)[i] for i in idx] for f in self.__dataclass_fields__])


def load_batch(rollouts_path: Path) -> Batch:
    t = read_table(rollouts_path, ROLLOUT_SCHEMA, optional=ROLLOUT_OPTIONAL_COLUMNS).to_pydict()
    if any(a is None for a in t["advantage"]):
        raise ValueError(f"{rollouts_path} has rows without an advantage: run the verify stage first")
    return Batch(
        contexts=t["prompt_token_ids"],
        responses=t["token_ids"],
        old_logprobs=t["old_logprobs"],
        behaviour_logprobs=t["behaviour_logprobs"],
        prefix_len=t["prefix_len"],
        seeded=[k != "on_policy" for k in t["kind"]],
        advantages=t["advantage"],
        source_age=[
            -1 if st is None or st < 0 else it - st for it, st in zip(t["iteration"], t["source_step"], strict=True)
        ],
        token_weights=[[] for _ in t["token_ids"]],
    )


def loss_token_count(b: Batch, prefix_loss: str) -> int:
    # Tokens in the loss: `context` prefixes are not.
    return sum(len(r) - (p if prefix_loss == "context" else 0) for r, p in zip(b.responses, b.prefix_len, strict=True))
