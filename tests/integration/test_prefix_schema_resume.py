"""A run written by code from before the prefix files' derived columns (issue #15), resumed by
today's code: the old files are kept and accepted, and the run ends exactly where an uninterrupted
run of today's code ends (the derived columns change nothing the pipeline computes)."""

from __future__ import annotations

from dataclasses import fields

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.resume import _same_state, _state
from thinking_seeds.pipeline import seed_files
from thinking_seeds.pipeline.loop import train
from thinking_seeds.pipeline.rows import PrefixRow
from thinking_seeds.store.parquet_io import read_table, write_table_atomic
from thinking_seeds.store.prefix_aggregates import AGGREGATES_NAME, write_prefix_aggregates
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA, PREFIX_SCHEMA
from thinking_seeds.store.sql import connect, query, run_named


def _old_write_rows(cls, rows, path):
    """write_rows as it was before the derived columns: PREFIX_SCHEMA's columns only."""
    names = [f.name for f in fields(cls)]
    table = pa.Table.from_pylist([{n: getattr(r, n) for n in names} for r in rows], schema=cls.SCHEMA)
    return write_table_atomic(table, path, schema=cls.SCHEMA)


def _old_seed_files(rows, path, prepared=None):
    """The seeds stage's files with the prefix file as it was written before the derived columns."""
    written = _old_write_rows(PrefixRow, rows, path)
    return written, write_prefix_aggregates(written)


class _Stop(Exception):
    pass


def test_old_run_resumed_by_new_code(tiny_run, tmp_path, monkeypatch):
    ref = tiny_run.run  # today's code, uninterrupted
    cfg = tiny_run.cfg
    assert cfg.iterations == 2
    run = RunDir.for_run(ref.run_id, tmp_path / "runs")

    def stop_after_iteration_0(k, stage, m):
        if (k, stage) == (0, "evaluate"):
            raise _Stop

    with monkeypatch.context() as mp:  # the old code writes iteration 0, then the process ends
        mp.setattr(seed_files, "write", _old_seed_files)
        with pytest.raises(_Stop):
            train(run, cfg, on_stage=stop_after_iteration_0)
    old_file = run.prefixes(0)
    assert pq.read_schema(old_file).names == PREFIX_SCHEMA.names
    kept = {p: p.stat().st_mtime_ns for p in (old_file, run.manifest_path(0, "seeds"), run.rollouts(0))}
    redone: list[tuple[int, str]] = []

    train(run, cfg, on_stage=lambda k, stage, m: redone.append((k, stage)))  # today's code resumes

    assert {p: p.stat().st_mtime_ns for p in kept} == kept, "a completed stage of the old code was redone"
    assert pq.read_schema(run.prefixes(1)).names == PREFIX_FILE_SCHEMA.names
    for step in range(1, cfg.iterations + 1):
        assert _same_state(_state(run, step), _state(ref, step)), f"θ_{step} differs from the uninterrupted run"
    for k in range(cfg.iterations):
        assert read_table(run.rollouts(k)).equals(read_table(ref.rollouts(k)))
    assert read_table(run.prefixes(1)).equals(read_table(ref.prefixes(1)))
    assert read_table(old_file).equals(read_table(ref.prefixes(0)).select(PREFIX_SCHEMA.names))
    # the seeds stage's aggregates (issue #25): an output of its manifest, written bit for bit again
    agg = run.prefixes(1).with_name(AGGREGATES_NAME)
    assert agg.read_bytes() == ref.prefixes(1).with_name(AGGREGATES_NAME).read_bytes()
    assert run.read_manifest(1, "seeds").outputs["prefix_aggregates"] == run.rel(agg)

    # ts sql reads the mixed run exactly as the reference
    a, b = connect(run.run_id, run.root.parent), connect(ref.run_id, ref.root.parent)
    sql = "SELECT * FROM prefixes ORDER BY iteration, seed_id"
    assert query(a, sql).rows == query(b, sql).rows
    for name in ("prefix_diversity", "prefix_diversity_history", "seeded_solve_rate"):
        assert run_named(a, name).rows == run_named(b, name).rows, name
    a.close()
    b.close()
