"""`ts sql` fetches only what it prints: a table the rows it shows, csv and json in batches as they are
written, with a one-line stop past --max-rows; a refused query is exactly one line; control characters
in the data reach the terminal escaped. A query of 10**12 rows shows each: fetching it whole would end
in the timeout (or a MemoryError, as it did)."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from thinking_seeds.flows.cli import app
from thinking_seeds.store import sql as sql_store

HUGE = "SELECT range, range::VARCHAR AS text FROM range(1000000000000)"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Two runs' worth of folders (config.yaml only): enough for the all-runs note to be due."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text("algorithm: grpo\n")
    monkeypatch.setenv("TS_RUNS_DIR", str(tmp_path))
    return tmp_path


def _ts(*args):
    t = time.perf_counter()
    res = CliRunner().invoke(app, ["sql", *args, "--timeout", "30"])
    return res, time.perf_counter() - t


def test_stream_fetches_batches_as_they_are_read_and_stops_on_close():
    con = sql_store.connect(runs_dir=None, views=[])
    try:
        res = sql_store.stream(con, HUGE, timeout=30, batch_rows=100)
        first = next(res.batches)
        assert len(first) == 100 and first[0] == (0, "0")
        t = time.perf_counter()
        res.close()
        assert time.perf_counter() - t < 5
        assert sql_store.query(con, HUGE, timeout=30, max_rows=7).rows[-1] == (6, "6")
        assert sql_store.query(con, "SELECT 1 AS x").rows == [(1,)]  # the connection still answers
    finally:
        con.close()


def test_a_table_fetches_only_the_rows_it_shows(runs):
    res, seconds = _ts(HUGE)
    assert res.exit_code == 0, res.output
    assert "first 1000 rows shown; the query has more" in res.output and "│ 999 │" in res.output.replace("   ", " ")
    assert seconds < 30


def test_csv_and_json_stream_and_stop_in_one_line_past_max_rows(runs):
    res, _ = _ts(HUGE, "-f", "csv", "--max-rows", "5")
    assert res.exit_code == 2
    assert res.stdout.splitlines() == ["range,text", *(f"{i},{i}" for i in range(5))]
    err = [x for x in res.stderr.splitlines() if x.strip() and not x.startswith("note: ")]
    assert len(err) == 1 and err[0].startswith("error: stopped after 5 rows (--max-rows)"), res.stderr
    res, _ = _ts(HUGE, "-f", "json", "--max-rows", "3")
    assert res.exit_code == 2 and json.loads(res.stdout) == [{"range": i, "text": str(i)} for i in range(3)]
    res, _ = _ts("SELECT range AS r FROM range(4)", "-f", "json")
    assert res.exit_code == 0 and json.loads(res.stdout) == [{"r": i} for i in range(4)]
    res, _ = _ts("SELECT 1 AS r WHERE false", "-f", "json")
    assert res.exit_code == 0 and json.loads(res.stdout) == []


def test_a_refused_query_is_exactly_one_line(runs):
    res, _ = _ts("drop table rollouts")
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and res.output.startswith("error: refused DROP statement"), res.output


def test_control_characters_are_escaped(runs):
    q = "SELECT chr(27) || ']0;title' || chr(7) AS t, chr(27) || '[2J' AS c, 'a' || chr(155) || 'b' AS csi"
    for fmt in ("table", "csv", "json"):
        res, _ = _ts(q, "-f", fmt)
        assert res.exit_code == 0, res.output
        assert not any(ch in res.stdout for ch in ("\x1b", "\x07", "\x9b")), (fmt, res.stdout)
    res, _ = _ts(q, "-f", "csv")
    assert "\\x1b]0;title\\x07" in res.stdout and "a\\x9bb" in res.stdout


def test_the_report_names_the_damaged_files_it_left_out(tmp_path, monkeypatch):
    from tests.helpers.synthetic_run import make_run
    from thinking_seeds.evals import report
    from thinking_seeds.evals.report import write_report

    monkeypatch.setattr(report, "_plots", lambda *args: {})  # the text is the subject (plots: test_report.py)

    run = make_run(tmp_path, "dmg")
    bad = sorted(run.root.glob("rollouts/iteration=*/rollouts.parquet"))[0]
    bad.write_bytes(bad.read_bytes()[:40])
    text = write_report("dmg", tmp_path).read_text()
    assert "Left out, damaged (1; `ts check dmg` says what to redo)" in text and str(bad) in text


def test_ts_runs_escapes_control_characters_from_a_config(tmp_path, monkeypatch):
    monkeypatch.setenv("TS_RUNS_DIR", str(tmp_path))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text('algorithm: "\\e[2Jgrpo"\n')  # YAML's \e: ESC
    for fmt in ("table", "csv"):
        res = CliRunner().invoke(app, ["runs", "-f", fmt])
        assert res.exit_code == 0 and "\x1b" not in res.stdout and "\\x1b[2Jgrpo" in res.stdout, res.stdout
