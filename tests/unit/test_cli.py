"""The `ts` command line (typer's CliRunner): sql, runs, report, config, and the error handler."""

from __future__ import annotations

import json
import time

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tests.helpers.synthetic_run import ITERATIONS, make_run
from thinking_seeds.flows.cli import _is_user_error, app

runner = CliRunner()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    make_run(base, "syn")
    return base


def ts(runs, *args):
    return runner.invoke(app, list(args), env={"TS_RUNS_DIR": str(runs), "COLUMNS": "250"})


def test_sql_named_query_json(runs):
    r = ts(runs, "sql", "--query", "prefix_diversity", "--run-id", "syn", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    age1 = [x for x in rows if x["breakdown"] == "source_age" and x["bucket"] == "1"][0]
    assert (age1["ngrams"], age1["distinct_ngrams"]) == (7, 5)


def test_sql_named_query_csv_and_table(runs):
    r = ts(runs, "sql", "-q", "clip_fraction", "-r", "syn", "-f", "csv")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "run_id,iteration,population,clipfrac,clipfrac_adv,ratio_above_frac,ratio_max"
    assert len(lines) == 1 + 4 * ITERATIONS
    r = ts(runs, "sql", "-q", "entropy_accuracy", "-r", "syn")
    assert r.exit_code == 0, r.output
    assert "entropy_on_policy" in r.stdout and "1: 0.3500, 2: 0.4500, 16: 0.6200" in r.stdout
    assert "4 rows" in r.stdout


def test_sql_free_query_and_show(runs):
    r = ts(runs, "sql", "SELECT kind, count(*) AS n FROM rollouts GROUP BY kind ORDER BY kind", "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [
        {"kind": "offpolicy_full", "n": 1},
        {"kind": "on_policy", "n": 8},
        {"kind": "seeded", "n": 6},
    ]
    r = ts(runs, "sql", "--query", "runs", "--show")
    assert r.exit_code == 0 and r.stdout.lstrip().startswith("WITH")


def test_sql_list(runs):
    r = ts(runs, "sql", "--list")
    assert r.exit_code == 0, r.output
    for name in ("runs", "prefix_diversity", "seeded_solve_rate", "entropy_accuracy", "clip_fraction"):
        assert name in r.stdout
    assert "distinct character 3-grams" in r.stdout
    assert "prefix_token_ids" in r.stdout  # the views and their columns


def test_sql_refuses_writes(runs):
    target = runs / "syn" / "rollouts" / "iteration=1" / "rollouts.parquet"
    before = target.read_bytes()
    r = ts(runs, "sql", f"COPY (SELECT 1) TO '{target}'")
    assert r.exit_code == 2
    assert "refused COPY statement" in r.output and "Traceback" not in r.output
    assert target.read_bytes() == before
    r = ts(runs, "sql", "DROP VIEW metrics")
    assert r.exit_code == 2 and "refused DROP" in r.output


def test_sql_bad_usage(runs):
    assert ts(runs, "sql").exit_code == 2  # neither a query nor --query nor --list
    r = ts(runs, "sql", "-q", "nope")
    assert r.exit_code == 2 and "unknown named query 'nope'" in r.output
    r = ts(runs, "sql", "-q", "runs", "-r", "missing")
    assert r.exit_code == 2 and "no run 'missing'" in r.output
    r = ts(runs, "sql", "SELEC 1")
    assert r.exit_code == 2 and "cannot parse" in r.output


def test_runs(runs):
    r = ts(runs, "runs")
    assert r.exit_code == 0, r.output
    assert "syn" in r.stdout and "thinking_seeds" in r.stdout and f"{ITERATIONS}/{ITERATIONS}" in r.stdout
    assert "0.3500 (step 3)" in r.stdout
    r = ts(runs, "runs", "-f", "json")
    (row,) = json.loads(r.stdout)
    assert row["run_id"] == "syn" and row["last_accuracy"] == 0.35


def test_runs_empty(tmp_path):
    r = ts(tmp_path / "none", "runs")
    assert r.exit_code == 0 and "no runs" in r.stdout


def test_report_no_prefect(runs):
    r = ts(runs, "report", "syn", "--no-prefect")
    assert r.exit_code == 0, r.output
    path = runs / "syn" / "reports" / "report.md"
    assert r.stdout.strip() == str(path) and path.exists()


def test_config_keys():
    r = runner.invoke(app, ["config", "keys"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    for key in ("prefix.ratio_max", "rollout.seeds_per_group", "loss.clip_ratio_c", "algorithm", "eval.samples"):
        assert key in r.stdout
    assert "Upper end of the prefix fraction" in r.stdout
    assert "Lower end of the prefix fraction λ ~ U[min, max]" in r.stdout  # no rich markup eaten
    r = runner.invoke(app, ["config", "keys", "ratio_max", "-f", "json"])
    (row,) = json.loads(r.stdout)
    assert row == {
        "key": "prefix.ratio_max",
        "type": "float",
        "default": "0.6",
        "allowed": ">= 0.0, <= 1.0",
        "help": "Upper end of the prefix fraction λ.",
    }


def test_config_show():
    r = runner.invoke(
        app, ["config", "show", "--preset", "tiny", "--set", "prefix.ratio_max=0.5", "--set", "iterations=2"]
    )
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load(r.stdout)
    assert cfg["prefix"]["ratio_max"] == 0.5 and cfg["iterations"] == 2 and cfg["algorithm"] == "thinking_seeds"


def test_bad_preset_exits_2_with_a_message():
    for args in (
        ["config", "show", "--preset", "nope"],
        ["train", "--preset", "nope", "--run-id", "x", "--no-prefect"],
        ["train", "--preset", "nope", "--run-id", "x"],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert "unknown preset 'nope'" in r.output and "Traceback" not in r.output


def test_bad_set_key_names_the_key():
    r = runner.invoke(app, ["config", "show", "--set", "prefix.ratio_mx=0.5"])
    assert r.exit_code == 2
    assert "unknown config key 'prefix.ratio_mx'" in r.output
    r = runner.invoke(app, ["train", "--run-id", "x", "--set", "rollout.group_size=0"])
    assert r.exit_code == 2 and "rollout.group_size" in r.output


def test_error_classes_handled():
    from thinking_seeds.config import ConfigError
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.run_dir import RunLockedError

    for e in (ConfigError("x"), DataError("x"), ValueError("x"), RunLockedError("x")):
        assert _is_user_error(e)
    assert not _is_user_error(RuntimeError("bug"))
    assert not _is_user_error(KeyError("bug"))


@pytest.mark.parametrize(
    "args, needle",
    [
        (["sql"], "ts sql: Invalid value: give exactly one of"),
        (["train"], "ts train: Missing option '--run-id'"),
        (["nosuch"], "ts: No such command 'nosuch'"),
        (["--bogus"], "ts: No such option: --bogus"),
        (["config", "keys", "--format", "nope"], "ts config keys: Invalid value for '--format'"),
        (["compare", "--seeds", "0,x", "--no-prefect"], "ts compare: Invalid value: --seeds must be integers"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, needle):
    """click's usage errors go through the same handler as every other user error: one line, exit 2."""
    r = runner.invoke(app, args, env={"TS_RUNS_DIR": str(tmp_path)})
    assert r.exit_code == 2, r.output
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: {needle}") and "--help`)" in line, line


def test_command_line_shows_what_the_user_typed_not_defaults_or_environment(monkeypatch):
    """The report's "Produced by" line: typed options only, so it reads the same on another machine."""
    from thinking_seeds.flows.cli.output import command_line

    app = typer.Typer()
    seen = {}

    @app.callback()
    def root(runs_dir: str = typer.Option(None, "--runs-dir", envvar="TS_RUNS_DIR")) -> None:
        pass

    @app.command()
    def compare(ctx: typer.Context, seeds: str = typer.Option("0,1,2", "--seeds"), preset: str = "tiny") -> None:
        seen["line"] = command_line(ctx)

    r = CliRunner().invoke(app, ["compare", "--preset", "countdown"], env={"TS_RUNS_DIR": "/somewhere/local"})
    assert r.exit_code == 0, r.output
    assert seen["line"] == "ts compare --preset countdown"
    CliRunner().invoke(app, ["--runs-dir", "/r x", "compare", "--seeds", "0,1,2"])
    assert seen["line"] == "ts --runs-dir '/r x' compare --seeds 0,1,2"


def test_a_ctrl_c_that_a_library_wraps_or_swallows_still_ends_the_command_as_ctrl_c(python_ctrl_c):
    """DuckDB turns a KeyboardInterrupt raised while it reads Arrow data into an InvalidInputException
    ("... failed: KeyboardInterrupt"), and a caller reading it as a damaged file went on: `ts sql`
    exited 2 with DuckDB's message, or lost the Ctrl-C and ran its never-ending query (the flaky
    test_cli_timeout_and_ctrl_c_come_back_in_one_line under load). A real SIGINT here, both ways."""
    import os
    import signal

    import duckdb

    from thinking_seeds.flows.cli.errors import handled, raise_if_interrupted

    def wrapped() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt:
            raise duckdb.InvalidInputException("reading the schema failed: KeyboardInterrupt") from None

    def swallowed() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            pass  # "a damaged file": skipped
        raise_if_interrupted()

    for body in (wrapped, swallowed):
        with pytest.raises(typer.Exit) as e, handled():
            body()
        assert e.value.exit_code == 130, body.__name__
    with handled():  # the next command starts with a clean slate
        raise_if_interrupted()


def test_prefect_run_logs_keep_one_line_for_a_user_error_and_the_stack_for_a_bug(monkeypatch):
    """`ts train` through Prefect printed ~100 lines of Prefect's tracebacks above its one error line
    for a bad reward function; the task/flow-run records of a user error now keep their message only."""
    import io
    import logging

    from thinking_seeds.flows.cli.errors import PREFECT_RUN_LOGGERS, quiet_user_error_tracebacks

    monkeypatch.delenv("TS_DEBUG", raising=False)
    quiet_user_error_tracebacks()
    quiet_user_error_tracebacks()  # installed once
    for name in PREFECT_RUN_LOGGERS:
        log = logging.getLogger(name)
        assert len(log.filters) == len({type(f) for f in log.filters})
        out = io.StringIO()
        # only this handler (not Prefect's API handler, which wants a flow run)
        monkeypatch.setattr(log, "handlers", [logging.StreamHandler(out)])
        monkeypatch.setattr(log, "propagate", False)
        for exc in (ValueError("reward.fn='m:f' returned 'yes'"), RuntimeError("a bug")):
            try:
                raise exc
            except Exception:
                log.error("Task run failed with exception: %r", exc, exc_info=True)
        text = out.getvalue()
        user, bug = text.split("Task run failed with exception: RuntimeError")
        assert "Traceback" not in user and "returned 'yes'" in user
        assert "Traceback" in bug
