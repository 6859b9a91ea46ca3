"""The pipeline's small parts: typed rows tied to the Parquet schemas, the stage index tied to the
graph, one-call manifest records, the atomic writer, and the stage-task factory."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from thinking_seeds.pipeline.graph import STAGES, upstream_of
from thinking_seeds.pipeline.rows import PrefixRow, RolloutRow, read_rows, write_rows
from thinking_seeds.pipeline.stages import STAGE_FUNCS
from thinking_seeds.store.atomic import atomic_path, atomic_write
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.parquet_io import content_hash
from thinking_seeds.store.run_dir import RunDir


@pytest.mark.parametrize("cls", [PrefixRow, RolloutRow])
def test_typed_rows_list_their_schema_fields_in_order(cls):
    assert [f.name for f in fields(cls)] == cls.SCHEMA.names


def _rollout(i: int) -> RolloutRow:
    return RolloutRow(
        run_id="r",
        iteration=0,
        prompt_id=f"p{i}",
        sample_id=i,
        kind="seeded",
        source_step=0,
        prefix_len=1,
        prompt_token_ids=[1, 2],
        token_ids=[3, 4],
        old_logprobs=[0.0, -0.5],
        behaviour_logprobs=[-0.25, 0.0],
        response_text="x",
        answer=None,
        status="pending",
        reward=None,
        advantage=None,
    )


def test_rows_round_trip_and_write_the_same_bytes(tmp_path: Path):
    rows = [_rollout(i) for i in range(3)]
    a = write_rows(RolloutRow, rows, tmp_path / "a.parquet")
    back = read_rows(RolloutRow, a)
    assert back == rows
    b = write_rows(RolloutRow, back, tmp_path / "b.parquet")  # a resumed stage rewrites identical files
    assert content_hash(a) == content_hash(b)
    assert read_rows(PrefixRow, write_rows(PrefixRow, [], tmp_path / "empty.parquet")) == []


def test_every_stage_of_the_graph_has_one_body_in_order():
    assert tuple(STAGE_FUNCS) == STAGES
    for stage in STAGES:
        assert all(up in STAGES or up == "prepare" for up, _ in upstream_of(stage, 1))


def test_manifest_records_an_output_in_one_call(tmp_path: Path):
    run = RunDir(tmp_path / "r")
    path = atomic_write(run.root / "rollouts" / "x.parquet", b"data")
    m = Manifest("verify", 0, "h")
    m.record(run, "rollouts", path, rows=7)
    m.record(run, "metrics", path)
    assert m.outputs == {"rollouts": "rollouts/x.parquet", "metrics": "rollouts/x.parquet"}
    assert m.hashes["rollouts"] == content_hash(path) and m.rows == {"rollouts": 7}
    run.write_manifest(m)  # the manifest file itself: the layout every earlier run has
    text = run.manifest_path(0, "verify").read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) and run.read_manifest(0, "verify") == m


def test_atomic_write_takes_bytes_text_or_a_writer_and_leaves_no_temp(tmp_path: Path):
    assert atomic_write(tmp_path / "b", b"\x00\x01").read_bytes() == b"\x00\x01"
    assert atomic_write(tmp_path / "t", "θ_0").read_text(encoding="utf-8") == "θ_0"
    assert atomic_write(tmp_path / "w", lambda f: f.write(b"w")).read_bytes() == b"w"
    with atomic_path(tmp_path / "p") as tmp:
        tmp.write_text("by name")
    assert (tmp_path / "p").read_text() == "by name"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "p", "t", "w"]


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path: Path):
    path = atomic_write(tmp_path / "f", "old")

    def crash(f):
        f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, crash)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f"]


def test_stage_tasks_come_from_one_factory_one_per_stage():
    from thinking_seeds import tasks

    made = [getattr(tasks, f"{s}_task") for s in ("prepare", *STAGES)]
    assert [t.name for t in made] == ["prepare", *STAGES]
    assert len({t.task_key for t in made}) == len(made)  # Prefect tells them apart
    assert all(not t.persist_result for t in made)  # no second record of what is done
