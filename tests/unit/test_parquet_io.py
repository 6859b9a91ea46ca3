"""Atomic Parquet writes, actionable read errors, content hashes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thinking_seeds.store.parquet_io import DataError, content_hash, read_table, write_table_atomic
from thinking_seeds.store.schemas import PREFIX_SCHEMA, ROLLOUT_SCHEMA


def _rollouts(n: int = 3) -> pa.Table:
    rows = [
        {
            "run_id": "r1",
            "iteration": 2,
            "prompt_id": f"train-{i}",
            "sample_id": i,
            "kind": "seeded" if i else "on_policy",
            "source_step": 4 if i else None,
            "prefix_len": 2 if i else 0,
            "prompt_token_ids": [1, 2],
            "token_ids": [5, 6, 7],
            "old_logprobs": [-0.1, -0.2, -0.3],
            "behaviour_logprobs": [-0.5, -0.6, 0.0] if i else [0.0, 0.0, 0.0],
            "response_text": "a 1+2=3. \\boxed{3}",
            "answer": "3",
            "status": "ok",
            "reward": 1.0,
            "advantage": None,
            "truncated": False,
            "policy_version": 0,
        }
        for i in range(n)
    ]
    return pa.Table.from_pylist(rows)  # inferred types (int64, double): the writer conforms them


def _replace(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_write_conforms_to_schema_and_round_trips(tmp_path: Path) -> None:
    path = write_table_atomic(_rollouts(), tmp_path / "rollouts" / "part.parquet", schema=ROLLOUT_SCHEMA)
    table = read_table(path, schema=ROLLOUT_SCHEMA)
    assert table.schema.equals(ROLLOUT_SCHEMA)  # int64 -> int32 token ids, double -> float32, ...
    assert table.column("source_step").to_pylist() == [None, 4, 4]
    assert _leftovers(path.parent) == ["part.parquet"]
    digest = content_hash(path)
    assert digest == content_hash(path) and len(digest) == 64
    write_table_atomic(_rollouts(4), path, schema=ROLLOUT_SCHEMA)
    assert content_hash(path) != digest


def test_write_rejects_tables_that_break_the_contract(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    with pytest.raises(DataError, match=r"missing columns: \['answer'\]"):
        write_table_atomic(_rollouts().drop_columns(["answer"]), path, schema=ROLLOUT_SCHEMA)
    bad_kind = _replace(_rollouts(), "kind", pa.array([None, "seeded", "seeded"], pa.string()))
    with pytest.raises(DataError, match="'kind' has 1 null"):
        write_table_atomic(bad_kind, path, schema=ROLLOUT_SCHEMA)
    bad_reward = _replace(_rollouts(), "reward", pa.array(["high", "low", "x"]))
    with pytest.raises(DataError, match="'reward' has type string"):
        write_table_atomic(bad_reward, path, schema=ROLLOUT_SCHEMA)
    assert _leftovers(tmp_path) == []


def test_crash_mid_write_leaves_no_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.parquet"
    real_write = pq.write_table

    def crashing_write(table: pa.Table, where, **kw) -> None:  # writes real bytes, then dies
        real_write(table, where, **kw)
        raise KeyboardInterrupt("simulated crash after the bytes were written")

    monkeypatch.setattr(pq, "write_table", crashing_write)
    with pytest.raises(KeyboardInterrupt):
        write_table_atomic(_rollouts(), path)
    assert _leftovers(tmp_path) == []

    # An earlier good file at the path survives a crashed overwrite untouched.
    monkeypatch.setattr(pq, "write_table", real_write)
    write_table_atomic(_rollouts(2), path)
    before = content_hash(path)
    monkeypatch.setattr(pq, "write_table", crashing_write)
    with pytest.raises(KeyboardInterrupt):
        write_table_atomic(_rollouts(5), path)
    assert content_hash(path) == before and _leftovers(tmp_path) == ["out.parquet"]


def test_writer_failure_from_arrow_itself_cleans_up(tmp_path: Path) -> None:
    # Parquet cannot store a union column: pyarrow fails after the temp file was opened.
    union = pa.UnionArray.from_sparse(pa.array([0, 1], pa.int8()), [pa.array([1, 2]), pa.array(["a", "b"])])
    with pytest.raises(pa.ArrowException):
        write_table_atomic(pa.table({"u": union}), tmp_path / "u.parquet")
    assert _leftovers(tmp_path) == []


def test_read_errors_name_the_file_and_say_what_to_do(tmp_path: Path) -> None:
    # Outside a run directory the file is someone's input: never advice to delete it.
    missing = tmp_path / "nope.parquet"
    with pytest.raises(DataError, match=rf"not found: {missing}; check the path"):
        read_table(missing)

    path = write_table_atomic(_rollouts(50), tmp_path / "t.parquet", schema=ROLLOUT_SCHEMA)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=rf"{path}: it is truncated or corrupt.*export it again from its source"):
        read_table(path)
    # A run's own file (tests/test_faults_errors.py has more): delete it and redo its stage.
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    own = tmp_path / "rollouts" / "iteration=0" / "rollouts.parquet"
    own.parent.mkdir(parents=True)
    own.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=rf"{own}: it is truncated or corrupt.*delete it and re-run the stage"):
        read_table(own)

    path = write_table_atomic(_rollouts(), tmp_path / "r.parquet", schema=ROLLOUT_SCHEMA)
    with pytest.raises(DataError, match=r"lacks column\(s\) \['seed_id', 'source_age'.*Expected schema: run_id"):
        read_table(path, schema=PREFIX_SCHEMA)
    assert read_table(path, schema=ROLLOUT_SCHEMA, optional=["advantage"]).num_rows == 3
    with pytest.raises(DataError, match="not found"):
        content_hash(missing)
