"""Reading a verl-schema data-set file (ours or a user's) into `Prompt`s, with one-line errors.

Rows are read in batches and reading stops at the rows asked for (`load_dataset(path, limit)`), so
`ts eval --data FILE --prompts 2` costs two rows whatever the file holds.

`load_dataset` checks the columns' types before it reads a row, so a wrongly typed user file is refused
naming the file and the column; `check_user_data` runs that check for `data.source=parquet` before a
run writes anything, and remembers files already found good in this process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow as pa

from thinking_seeds.data.prompts import Message, Prompt
from thinking_seeds.store.parquet_io import DataError, read_batches
from thinking_seeds.store.schemas import DATASET_OPTIONAL_COLUMNS, DATASET_SCHEMA

__all__ = ["check_user_data", "load_dataset"]

# Rows converted to Python at a time: a few MB of ordinary prompts, so a large file is never whole in memory.
_BATCH_ROWS = 4096
# The columns a Prompt is made of (any others in a user's file are never read into Python).
_READ_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info", "target")


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


def _check_column_types(schema: pa.Schema, path: Path) -> None:
    """DataError naming the first column whose type load_dataset cannot read, the expected and found
    types and how to write the column (the usual slip: a dict column saved as JSON text)."""
    for name, (ok, expected, how) in _COLUMN_TYPES.items():
        if name not in schema.names:
            continue
        found = schema.field(name).type
        if not ok(found):
            raise DataError(
                f"{path}: column {name!r} has type {found}, expected {expected} (verl's data-set schema); "
                f"to fix, write that column as {how}"
            )


def _rows(path: Path, limit: int | None) -> Iterator[dict[str, Any]]:
    """The file's rows as dicts of the columns load_dataset reads, the first `limit` of them (None: all),
    read in batches: a file of millions of rows costs the rows taken, not the file."""
    batch = max(1, min(limit, _BATCH_ROWS)) if limit is not None else _BATCH_ROWS
    schema, rows, batches = read_batches(
        path, schema=DATASET_SCHEMA, optional=DATASET_OPTIONAL_COLUMNS, batch_size=batch, columns=_READ_COLUMNS
    )
    if rows == 0:
        raise DataError(
            f"{path} has no rows: a data set needs at least one prompt; check how the file was made "
            "(a filter that dropped every row?) or point to another file"
        )
    _check_column_types(schema, path)
    left = rows if limit is None else min(limit, rows)
    with closing(batches):
        for b in batches:
            yield from b.slice(0, left).to_pylist()
            left -= min(left, b.num_rows)
            if left == 0:
                return


def load_dataset(path: str | os.PathLike[str], limit: int | None = None) -> list[Prompt]:
    """Read a verl-schema Parquet file (DATASET_SCHEMA; `ability`, `extra_info`, `target` may be
    absent) into Prompts: its first `limit` rows (None: all), reading no further. DataError names
    the file and the column or row that is wrong."""
    path = Path(path)
    prompts: list[Prompt] = []
    seen_ids: dict[str, int] = {}
    for row, r in enumerate(_rows(path, limit)):
        source, messages, reward_model = r["data_source"], r["prompt"], r["reward_model"]
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
        info = r.get("extra_info") or {}
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
                target=r.get("target"),
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
