"""Data sets: chain_sum splits in verl's Parquet layout, the warm-up corpus, and a loader.

`build_chain_sum_splits` draws from ONE reasoning-gym stream and fills test, then validation,
then train, skipping every compact expression already used: the splits are disjoint (and free
of duplicates), and the held-out splits do not change when only `train_size` changes.

`load_dataset` reads any verl-schema Parquet file (ours or a user's) into `Prompt`s.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from thinking_seeds.data.chain_sum import compact, question, solution
from thinking_seeds.store.parquet_io import DataError, read_table, write_table_atomic
from thinking_seeds.store.schemas import DATASET_OPTIONAL_COLUMNS, DATASET_SCHEMA

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


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Prompt:
    """One RL prompt.

    prompt_id:    stable id, '<split>-<index>' from extra_info, else '<file stem>-<row>'
    messages:     the chat prompt (use `chat()` for the list-of-dicts chat templates expect)
    ground_truth: reward_model.ground_truth (the answer text the verifier compares with)
    data_source:  e.g. 'chain_sum'; selects reasoning-gym's checker for that backend
    rg_entry:     the reasoning-gym entry as JSON, or None for rows not made by reasoning-gym
    target:       a worked solution, or None
    """

    prompt_id: str
    messages: tuple[Message, ...]
    ground_truth: str
    data_source: str
    rg_entry: str | None = None
    target: str | None = None

    def chat(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in self.messages]

    @property
    def user_text(self) -> str:
        """Content of the last user message (the question, for single-turn prompts)."""
        for m in reversed(self.messages):
            if m.role == "user":
                return m.content
        raise ValueError(f"prompt {self.prompt_id} has no user message")


def _derived_seed(seed: int, stream: str) -> int:
    # reasoning-gym seeds item i with Random(seed + i): user seeds 0 and 1 would give the same
    # items shifted by one. Hashing spreads user seeds (and our streams) far apart.
    digest = hashlib.sha256(f"thinking-seeds/{stream}/{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _entries(
    seed: int, stream: str, min_terms: int, max_terms: int, min_digits: int, max_digits: int, limit: int
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, entry) for the first `limit` items of a deterministic reasoning-gym stream."""
    import reasoning_gym  # heavy import (~0.8 s): only the builders need it

    ds = reasoning_gym.create_dataset(
        DATA_SOURCE,
        size=limit,
        seed=_derived_seed(seed, stream),
        min_terms=min_terms,
        max_terms=max_terms,
        min_digits=min_digits,
        max_digits=max_digits,
    )
    for i in range(limit):
        yield i, ds[i]


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
    stream = (entry for _, entry in _entries(seed, "splits", min_terms, max_terms, min_digits, max_digits, limit))
    return fill_splits(
        out_dir,
        sizes,
        stream,
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
    for _, entry in _entries(seed, "warmup", min_terms, max_terms, min_digits, max_digits, limit):
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


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (
        pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t)
    )


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or getattr(pa.types, "is_list_view", lambda _: False)(t)


def _struct_field(t: pa.DataType, name: str) -> pa.DataType | None:
    if not pa.types.is_struct(t):
        return None
    i = t.get_field_index(name)
    return t.field(i).type if i >= 0 else None


# column -> (is the found type usable, what is expected, how to write it). Lenient where the code
# that reads the column is: extra struct fields, large/dictionary strings, integer ground truths
# (read as their text) and all-null optional columns load; anything else would be misread.
_COLUMN_TYPES = {
    "data_source": (_is_text, "string", "text naming the task, e.g. 'gsm8k'"),
    "prompt": (
        lambda t: (
            _is_list(t)
            and _is_text(_struct_field(t.value_type, "content") or pa.null())
            and (_struct_field(t.value_type, "role") is None or _is_text(_struct_field(t.value_type, "role")))
        ),
        "list<struct<role: string, content: string>>",
        "a list of chat messages per row, e.g. [{'role': 'user', 'content': 'What is 2+3?'}]",
    ),
    "reward_model": (
        lambda t: (gt := _struct_field(t, "ground_truth")) is not None and (_is_text(gt) or pa.types.is_integer(gt)),
        "struct<style: string, ground_truth: string>",
        "a dict per row (not JSON text), e.g. {'style': 'rule', 'ground_truth': '5'}",
    ),
    "ability": (lambda t: _is_text(t) or pa.types.is_null(t), "string", "text such as 'math' (or drop the column)"),
    "extra_info": (
        lambda t: (
            pa.types.is_null(t)
            or (
                pa.types.is_struct(t)
                and all(
                    (f := _struct_field(t, name)) is None or ok(f)
                    for name, ok in (
                        ("split", _is_text),
                        ("index", lambda i: pa.types.is_integer(i) or _is_text(i)),
                        ("rg_entry", _is_text),
                    )
                )
            )
        ),
        "struct<split: string, index: int64, ...>",
        "a dict per row (not JSON text), e.g. {'split': 'train', 'index': 0} (or drop the column)",
    ),
    "target": (
        lambda t: _is_text(t) or pa.types.is_null(t),
        "string",
        "a worked solution as text (or drop the column)",
    ),
}


def _check_column_types(table: pa.Table, path: Path) -> None:
    """DataError naming the first column whose type load_dataset cannot read, the expected and found
    types and how to write the column (the usual slip: a dict column saved as JSON text)."""
    for name, (ok, expected, how) in _COLUMN_TYPES.items():
        if name not in table.column_names:
            continue
        found = table.schema.field(name).type
        if not ok(found):
            raise DataError(
                f"{path}: column {name!r} has type {found}, expected {expected} (verl's data-set schema); "
                f"to fix, write that column as {how}"
            )


def load_dataset(path: str | os.PathLike[str]) -> list[Prompt]:
    """Read a verl-schema Parquet file (DATASET_SCHEMA; `ability`, `extra_info`, `target` may be
    absent) into Prompts. DataError names the file and the column or row that is wrong."""
    path = Path(path)
    table = read_table(path, schema=DATASET_SCHEMA, optional=DATASET_OPTIONAL_COLUMNS)
    if table.num_rows == 0:
        raise DataError(
            f"{path} has no rows: a data set needs at least one prompt; check how the file was made "
            "(a filter that dropped every row?) or point to another file"
        )
    _check_column_types(table, path)
    extra_info = table.column("extra_info").to_pylist() if "extra_info" in table.column_names else None
    targets = table.column("target").to_pylist() if "target" in table.column_names else None
    prompts: list[Prompt] = []
    seen_ids: dict[str, int] = {}
    for row, (source, messages, reward_model) in enumerate(
        zip(
            table.column("data_source").to_pylist(),
            table.column("prompt").to_pylist(),
            table.column("reward_model").to_pylist(),
            strict=True,
        )
    ):
        ground_truth = (reward_model or {}).get("ground_truth")
        if ground_truth is None or str(ground_truth).strip() == "":
            raise DataError(
                f"{path}: row {row} has an empty reward_model.ground_truth; every prompt needs the "
                "answer its responses are verified against (fix or drop that row)"
            )
        if not messages or any(not isinstance(m, dict) or m.get("content") is None for m in messages):
            raise DataError(
                f"{path}: row {row} has an empty 'prompt' column or a message without content; "
                "expected a list of {role, content}"
            )
        if not source:
            raise DataError(f"{path}: row {row} has an empty 'data_source'")
        info = (extra_info[row] if extra_info is not None else None) or {}
        if info.get("split") is not None and info.get("index") is not None:
            prompt_id = f"{info['split']}-{info['index']}"
        else:
            prompt_id = f"{path.stem}-{row}"
        if prompt_id in seen_ids:
            raise DataError(
                f"{path}: rows {seen_ids[prompt_id]} and {row} share the prompt id {prompt_id!r} "
                "(from extra_info.split/index); make (split, index) unique per row"
            )
        seen_ids[prompt_id] = row
        prompts.append(
            Prompt(
                prompt_id=prompt_id,
                messages=tuple(Message(role=m.get("role") or "user", content=m["content"]) for m in messages),
                ground_truth=str(ground_truth),
                data_source=source,
                rg_entry=info.get("rg_entry"),
                target=targets[row] if targets is not None else None,
            )
        )
    return prompts


# User files read and found good in this process, by (path, size, mtime): the CLI, the flow and the
# prepare stage each check before they write, and a large file should be read once, not three times.
_CHECKED: set[tuple[str, int, int]] = set()


def check_user_data(data: Any) -> None:
    """data.source=parquet (`data` is a DataConfig): read the user's train and validation files as a
    run would, so a missing, empty, corrupt or wrongly typed one is refused in one line naming the
    file -- call it before anything is written (run directory, lock, config.yaml). A file already
    checked in this process and unchanged since (size, mtime) is not read again."""
    if data.source == "parquet":
        for path in (data.train_path, data.val_path):
            try:
                st = os.stat(path)
                key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
            except OSError:
                key = None  # load_dataset says what is wrong with it
            if key is None or key not in _CHECKED:
                load_dataset(path)
                if key is not None:
                    _CHECKED.add(key)
