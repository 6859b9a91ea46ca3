"""A live run of many small iteration files (the tiny and game24 presets write 64 prefixes an
iteration: ~15,600 files per million prefixes) compacts each finished block of iterations behind
itself (store/compaction.compact_behind, called by the loop when an iteration starts), so `ts sql`
on it reads a few parts and at most one block of small files -- never one footer per iteration --
and every named query answers exactly as it does from the files alone."""

from __future__ import annotations

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from tests.helpers.synthetic_run import rollout_rows
from tests.unit.test_sql_aggregates import _answers, _prefix_table, _same
from thinking_seeds.flows.cli import app
from thinking_seeds.store import compaction, sql_corpus, sql_tables
from thinking_seeds.store.compaction import PATTERNS, compact_behind, parts, wait_for_compaction
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.prefix_aggregates import write_prefix_aggregates
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import PREFIX_FILE_SCHEMA, ROLLOUT_SCHEMA, with_derived_prefix_columns

BLOCK = 4  # iterations per part here (100 in a run)
ITERATIONS = 14  # blocks 0-11 finished once iteration 12 started; 12-13 are the live tail
ROLLOUTS = rollout_rows("live")


@pytest.fixture(scope="module", autouse=True)
def small_blocks():
    mp = pytest.MonkeyPatch()
    mp.setattr(compaction, "BLOCK", BLOCK)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("live")
    return base, _live_run(base / "plain", compacting=False), _live_run(base / "live", compacting=True)


def _live_run(base, compacting: bool) -> RunDir:
    """Iterations as the stages write them (metrics, the prefix file and its aggregates, manifests);
    with `compacting`, each iteration's start calls compact_behind as the loop does: before its first
    stage runs, so before iteration k has any manifest (pipeline/loop.stage_outcome)."""
    run = RunDir.for_run("live", base)
    for k in range(ITERATIONS):
        if compacting:
            compact_behind(run.root, k)
        run.write_manifest(Manifest("snapshot", k, "h"))
        write_table_atomic(
            with_derived_prefix_columns(_prefix_table("live", k)), run.prefixes(k), schema=PREFIX_FILE_SCHEMA
        )
        write_prefix_aggregates(run.prefixes(k))
        rows = [dict(r, iteration=k, source_step=None if r["source_step"] is None else k // 2) for r in ROLLOUTS]
        write_table_atomic(pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA), run.rollouts(k), schema=ROLLOUT_SCHEMA)
        run.write_metrics(k, "update", {"actor/entropy/all": 2.0 - k / 100, "actor/pg_clipfrac/all": k / 1000})
        run.write_metrics(k, "verify", {"reward/mean": k / 50})
        run.write_manifest(Manifest("evaluate", k, "h"))
    wait_for_compaction(run.root)
    return run


def test_a_live_run_compacts_behind_itself_and_reads_one_block_of_small_files(runs, monkeypatch):
    base, plain, live = runs
    assert all(not parts(plain.root, kind) for kind in PATTERNS)
    for kind in PATTERNS:  # every finished block, each kind, fresh; the unfinished tail has none
        got = parts(live.root, kind)
        assert [p.first for p in got] == [0, 4, 8], kind
        assert all(p.fresh(live.root) for p in got), kind
    read: list = []
    original = sql_corpus._aggregates
    monkeypatch.setattr(sql_corpus, "_aggregates", lambda files: read.extend(files) or original(files))
    opened: list = []  # the footers corpus_files (the `runs` query's row counts) opens
    footers = sql_tables.footers
    monkeypatch.setattr(sql_tables, "footers", lambda files, *a: opened.extend(files) or footers(files, *a))
    _same(_answers(base / "live", "live"), _answers(base / "plain", "live"))
    from thinking_seeds.store.sql_files import view_files

    rollout_parts, rollout_files = view_files(live.root, "rollouts", "rollouts/iteration=*/rollouts.parquet")
    assert (len(rollout_parts), len(rollout_files)) == (3, ITERATIONS - 12)  # three parts, then the tail's files
    # the aggregates read one by one: the tail's only (the plain run reads every iteration's)
    live_read = {p for p in read if str(p).startswith(str(live.root))}
    assert live_read == {live.prefixes(k) for k in range(12, ITERATIONS)}
    tail = {f(k) for k in range(12, ITERATIONS) for f in (live.prefixes, live.rollouts)}
    assert {p for p in opened if str(p).startswith(str(live.root))} == tail  # the parts counted the rest


def test_ts_sql_on_a_live_run_of_many_small_files(runs):
    tmp_path = runs[0] / "live"
    runner = CliRunner()
    for name in ("prefix_diversity", "prefix_diversity_history", "seeded_solve_rate", "entropy_accuracy", "runs"):
        r = runner.invoke(
            app, ["sql", "--query", name, "--run-id", "live", "-f", "csv"], env={"TS_RUNS_DIR": str(tmp_path)}
        )
        assert r.exit_code == 0, r.output
        assert len(r.stdout.strip().splitlines()) > 1, name  # a header and rows
        assert r.stderr == "", r.stderr  # no file reported damaged or skipped


def test_compact_behind_starts_only_at_block_ends_and_never_raises(tmp_path):
    assert compact_behind(tmp_path / "nothing", 0) is None and compact_behind(tmp_path / "nothing", BLOCK + 1) is None
    t = compact_behind(tmp_path / "no-such-run", 2 * BLOCK)  # nothing to compact: the thread ends quietly
    assert t is not None
    wait_for_compaction(tmp_path / "no-such-run")
    assert not t.is_alive()


def test_large_rollout_files_are_read_one_by_one_never_copied(runs, tmp_path, monkeypatch):
    import shutil

    run = RunDir(shutil.copytree(runs[1].root, tmp_path / "plain"))
    monkeypatch.setattr(compaction, "SMALL_FILES", 1)  # every rollout file "large"
    compaction.compact(run.root)
    assert not parts(run.root, "rollouts") and [p.first for p in parts(run.root, "metrics")] == [0, 4, 8]
