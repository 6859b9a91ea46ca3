"""`ts sql`'s catalogue and notes (issue #27): one list of views (store/sql_catalog.py) behind
--help, --list, the views connect() builds and the README; free SQL over all runs says which it
reads; `ts compact` says it works on blocks of 100 iterations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.synthetic_run import make_run
from thinking_seeds.flows.cli import app
from thinking_seeds.store.compaction import BLOCK
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.sql import VIEWS, connect, query, view_columns
from thinking_seeds.store.sql_catalog import VIEW_HELP

README = Path(__file__).resolve().parents[2] / "README.md"
runner = CliRunner()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    make_run(base, "syn")
    make_run(base, "other")
    return base


def ts(base, *args):
    return runner.invoke(app, list(args), env={"TS_RUNS_DIR": str(base), "COLUMNS": "400"})


def test_readme_lists_the_views_the_code_has():
    lines = [ln for ln in README.read_text().splitlines() if ln.startswith("ts sql ") and "# views:" in ln]
    assert len(lines) == 1, "the README's `ts sql` example names the views once"
    listed = re.search(r"# views: (.*?) \(read-only\)", lines[0]).group(1).split(", ")
    assert listed == list(VIEWS)


def test_help_list_and_connect_show_every_view(two_runs):
    assert list(view_columns()) == list(VIEWS) == list(VIEW_HELP)
    r = ts(two_runs, "sql", "--help")
    assert r.exit_code == 0, r.output
    help_text = " ".join(r.stdout.replace("│", " ").split())
    for view in VIEWS:
        assert view in help_text, view
    r = ts(two_runs, "sql", "--list")
    assert r.exit_code == 0, r.output
    for view, what in VIEW_HELP.items():
        assert view in r.stdout and what in r.stdout, view
    con = connect("syn", two_runs)
    try:
        built = query(con, "SELECT view_name FROM duckdb_views() WHERE NOT internal").column("view_name")
    finally:
        con.close()
    assert sorted(v for v in built if not v.startswith("_ts_")) == sorted(VIEWS)


def test_free_sql_over_all_runs_says_which(two_runs):
    r = ts(two_runs, "sql", "SELECT count(*) AS n FROM rollouts", "-f", "csv")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines() == ["n", "30"]  # stdout stays data
    note = r.stderr.strip()
    assert note.startswith("note: no --run-id: the views hold all 2 runs") and "(other, syn)" in note
    for args in (["-r", "syn"], ["-q", "runs"]):  # one run asked for; a named query groups by run_id
        r = ts(two_runs, "sql", *(args if args[0] == "-q" else ["SELECT 1", *args]), "-f", "csv")
        assert r.exit_code == 0, r.output
        assert r.stderr == "", args


def test_free_sql_over_one_run_needs_no_note(tmp_path):
    make_run(tmp_path, "only")
    r = ts(tmp_path, "sql", "SELECT 1 AS x", "-f", "csv")
    assert r.exit_code == 0 and r.stderr == ""


def test_compact_says_it_works_on_blocks(tmp_path):
    run = RunDir.for_run("short", tmp_path)
    for k in range(40):
        run.write_manifest(Manifest("evaluate", k, "h"))
    r = ts(tmp_path, "compact", "short")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == (
        f"up to date: ts compact works on finished blocks of {BLOCK} iterations and this run has none yet; "
        f"iterations 0-39 are read as they are until iteration {BLOCK} starts"
    )
