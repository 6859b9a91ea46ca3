"""Every `ts` command says a user's mistake in ONE line and exits 2 (issue #27, item 5): a run id that
does not exist, a file that is missing, weights that are corrupt -- with the global --runs-dir given
after the command, where users type it (`ts eval X --runs-dir D` used to be "No such option").

A new command without its cases here fails the test. Without Prefect (in process, seconds); the same
commands through Prefect's flows, in subprocesses: tests/e2e/test_errors_every_command_prefect.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.helpers.tiny import copy_run
from tests.integration.test_faults_weights import flip_byte
from thinking_seeds.flows.cli import app


def cases(runs: Path, tmp: Path, prefect: bool) -> dict[str, list[tuple[list[str], str]]]:
    """Per command: (arguments with one mistake, what its one line must say). `corrupt` is a run whose
    last policy is damaged; the runs folder is given after the command."""
    plain = [] if prefect else ["--no-prefect"]
    d = ["--runs-dir", str(runs)]
    no_run = f"no run 'nosuch' under {runs}"  # --runs-dir after the command was read
    missing = f"no file {tmp / 'missing.yaml'}"
    corrupt = "policy/step_000002 is corrupt: model.safetensors"
    out = ["--out", str(tmp / "o")]
    grpo = ["--methods", "grpo", "--seeds", "0"]
    return {
        "train": [(["train", "--run-id", "x", "--preset", str(tmp / "missing.yaml"), *plain, *d], missing)],
        "eval": [
            (["eval", "nosuch", *d], no_run),
            (["eval", "corrupt", *d], corrupt),
            (["eval", "corrupt", "--step", "99", *d], "has no policy step 99"),
        ],
        "export": [(["export", "nosuch", *out, *d], no_run), (["export", "corrupt", *out, *d], corrupt)],
        "report": [(["report", "nosuch", *plain, *d], no_run)],
        "compare": [
            (["compare", "--preset", str(tmp / "missing.yaml"), *grpo, *plain, *d], missing),
            (["compare", *grpo, "--reference", "nosuch", "--id", "c", *plain, *d], "--reference nosuch: no run"),
        ],
        "runs": [(["runs", "--format", "nosuch", *d], "'nosuch' is not one of")],
        "sql": [
            (["sql", "--query", "runs", "--run-id", "nosuch", *d], no_run),
            (["sql", "--query", "nosuch", *d], "unknown named query 'nosuch'"),
        ],
        "compact": [(["compact", "nosuch", *d], no_run)],
        "check": [(["check", "nosuch", *d], no_run)],
        "plan": [
            (["plan", "--preset", str(tmp / "missing.yaml"), *d], missing),
            (["plan", "--set", f"model.path={tmp / 'nomodel'}", *d], "config.json missing"),
        ],
        "trainer-node": [
            (["trainer-node", "--run-id", "nosuch", "--machine-rank", "1", "--wait", "0", *d], f"no {runs}/nosuch/")
        ],
        "config": [(["config", "show", "--preset", str(tmp / "missing.yaml"), *d], missing)],
        "data": [
            (
                ["data", "asdiv", "--out", str(tmp / "a.parquet"), "--source", str(tmp / "missing.jsonl"), *d],
                f"no file {tmp / 'missing.jsonl'}",
            ),
        ],
    }


def one_line_errors(rows, run) -> list[str]:
    """What is wrong with each (args, expected) when `run(args)` gives (exit code, output)."""
    bad = []
    for args, expected in rows:
        code, output = run(args)
        lines = [line for line in output.splitlines() if line.strip()]
        if code != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or expected not in lines[0]:
            bad.append(f"ts {' '.join(args)}: exit {code}, {len(lines)} lines, expected {expected!r}:\n{output}")
    return bad


@pytest.fixture(scope="module")
def runs_with_a_corrupt_run(tiny_run, tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("error-runs")
    run = copy_run(tiny_run.run, runs)
    (runs / run.run_id).rename(runs / "corrupt")
    flip_byte(runs / "corrupt" / "policy" / f"step_{tiny_run.cfg.iterations:06d}" / "model.safetensors")
    return runs


def test_every_command_says_a_mistake_in_one_line_and_exit_2(runs_with_a_corrupt_run, tmp_path):
    table = cases(runs_with_a_corrupt_run, tmp_path, prefect=False)
    commands = set(typer.main.get_command(app).commands)
    assert commands == set(table), f"commands without error cases here: {commands ^ set(table)}"
    bad = one_line_errors(
        [case for rows in table.values() for case in rows],
        lambda args: (lambda r: (r.exit_code, r.output))(CliRunner().invoke(app, args)),
    )
    assert not bad, "\n".join(bad)
