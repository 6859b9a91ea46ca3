"""chain_sum splits (verl layout, disjoint, deterministic), warm-up corpus, and the loader."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from thinking_seeds.data.chain_sum import compact, evaluate, question, solution, strategy_of
from thinking_seeds.data.sources import build_chain_sum_splits, expressions_of, load_dataset, warmup_corpus
from thinking_seeds.store.parquet_io import DataError, content_hash, read_table, write_table_atomic
from thinking_seeds.store.schemas import DATASET_SCHEMA


def _expr(q: str) -> str:
    return q.removeprefix("Compute ").removesuffix(". Answer in \\boxed{}.")


SIZES = dict(train_size=300, val_size=60, test_size=60)


@pytest.fixture(scope="module")
def splits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_chain_sum_splits(tmp_path_factory.mktemp("d1"), seed=3, **SIZES)


def test_splits_have_the_verl_layout(splits: dict[str, Path]) -> None:
    assert {s: p.name for s, p in splits.items()} == {
        "train": "train.parquet",
        "validation": "validation.parquet",
        "test": "test.parquet",
    }
    table = read_table(splits["validation"])
    assert table.schema.equals(DATASET_SCHEMA) and table.num_rows == SIZES["val_size"]
    row = table.slice(5, 1).to_pylist()[0]
    entry = json.loads(row["extra_info"]["rg_entry"])
    expr = compact(entry["metadata"]["expression"])
    assert row["data_source"] == "chain_sum" and row["ability"] == "math"
    assert row["prompt"] == [{"role": "user", "content": question(expr)}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": entry["answer"]}
    assert row["extra_info"]["split"] == "validation" and row["extra_info"]["index"] == 5
    assert row["target"] == solution(expr, "a") and evaluate(expr) == int(entry["answer"])


def test_splits_are_disjoint_and_duplicate_free(splits: dict[str, Path]) -> None:
    exprs = {
        s: [compact(json.loads(p.rg_entry)["metadata"]["expression"]) for p in load_dataset(path)]
        for s, path in splits.items()
    }
    assert all(len(set(v)) == len(v) for v in exprs.values())
    assert not set(exprs["train"]) & set(exprs["test"])
    assert not set(exprs["train"]) & set(exprs["validation"])
    assert not set(exprs["validation"]) & set(exprs["test"])
    assert expressions_of(splits["test"]) == set(exprs["test"])


def test_splits_are_deterministic_and_held_out_stable(splits: dict[str, Path], tmp_path: Path) -> None:
    again = build_chain_sum_splits(tmp_path / "again", seed=3, **SIZES)
    assert all(content_hash(again[s]) == content_hash(splits[s]) for s in splits)
    # held-out splits do not move when only the train size changes
    bigger = build_chain_sum_splits(tmp_path / "bigger", seed=3, **{**SIZES, "train_size": 400})
    assert content_hash(bigger["test"]) == content_hash(splits["test"])
    assert content_hash(bigger["validation"]) == content_hash(splits["validation"])
    other = build_chain_sum_splits(tmp_path / "other", seed=4, **SIZES)
    assert content_hash(other["test"]) != content_hash(splits["test"])
    # neighbouring seeds are not reasoning-gym's shifted copies of each other
    assert len(expressions_of(other["test"]) & expressions_of(splits["test"])) < 10


def test_too_small_expression_space_is_reported(tmp_path: Path) -> None:
    # 2 one-digit terms: 10 * 10 * 2 = 200 expressions at most
    with pytest.raises(ValueError, match="distinct expressions.*widen the term/digit ranges"):
        build_chain_sum_splits(tmp_path, 300, 10, 10, seed=0, min_terms=2, max_terms=2, max_digits=1)


def test_warmup_corpus_mixes_strategies_and_avoids_held_out(splits: dict[str, Path]) -> None:
    held_out = expressions_of(splits["test"]) | expressions_of(splits["validation"])
    corpus = warmup_corpus(400, seed=3, exclude=held_out)
    assert corpus == warmup_corpus(400, seed=3, exclude=held_out)
    strategies = [strategy_of(sol) for _, sol in corpus]
    assert strategies.count("b") == 200 and strategies.count("a") == 200
    for q, sol in corpus:
        expr = _expr(q)
        assert expr not in held_out and q == question(expr) and sol == solution(expr, strategy_of(sol))
    # excluding the corpus's first pick makes it skip that expression
    first = corpus[0][0]
    assert corpus[1][0] != first and corpus[1][0] == warmup_corpus(5, seed=3, exclude={_expr(first)})[0][0]
    assert [strategy_of(s) for _, s in warmup_corpus(10, seed=1, exclude=set(), mix=0.0)] == ["a"] * 10


def test_load_dataset_reads_prompts(splits: dict[str, Path]) -> None:
    prompts = load_dataset(splits["test"])
    p = prompts[7]
    assert p.prompt_id == "test-7" and p.data_source == "chain_sum"
    assert p.chat() == [{"role": "user", "content": p.user_text}]
    assert p.target is not None and p.target.endswith(f"\\boxed{{{p.ground_truth}}}")
    assert json.loads(p.rg_entry)["answer"] == p.ground_truth


def _user_rows() -> list[dict]:
    return [
        {
            "data_source": "gsm8k",
            "prompt": [{"role": "user", "content": f"What is {i}+1?"}],
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
        }
        for i in range(3)
    ]


def test_load_dataset_accepts_minimal_user_files(tmp_path: Path) -> None:
    path = write_table_atomic(pa.Table.from_pylist(_user_rows()), tmp_path / "mine.parquet")
    prompts = load_dataset(path)
    assert [p.prompt_id for p in prompts] == ["mine-0", "mine-1", "mine-2"]
    assert prompts[2].ground_truth == "3" and prompts[2].rg_entry is None and prompts[2].target is None


def test_load_dataset_errors_name_file_column_and_row(tmp_path: Path) -> None:
    no_gt = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "reward_model"} for r in _user_rows()])
    path = write_table_atomic(no_gt, tmp_path / "a.parquet")
    with pytest.raises(DataError, match=rf"{path} lacks column\(s\) \['reward_model'\]"):
        load_dataset(path)

    rows = _user_rows()
    rows[1]["reward_model"] = {"style": "rule", "ground_truth": "  "}
    path = write_table_atomic(pa.Table.from_pylist(rows), tmp_path / "b.parquet")
    with pytest.raises(DataError, match=rf"{path}: row 1 has an empty reward_model.ground_truth"):
        load_dataset(path)

    rows = _user_rows()
    for r in rows:
        r["extra_info"] = {"split": "train", "index": 0}
    path = write_table_atomic(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    with pytest.raises(DataError, match="rows 0 and 1 share the prompt id 'train-0'"):
        load_dataset(path)
