"""What `ts train` prints on a tiny 2-iteration run, piped, in both modes: the prepare stage says what it
does before it starts and how long it took, then one line per iteration (and per evaluation); in
Prefect mode none of Prefect's per-task-run "Finished in state" lines unless --verbose."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

TS = [sys.executable, "-m", "thinking_seeds.flows.cli"]


def _train(tmp_path, tiny_overrides, run_id: str, *extra: str) -> list[str]:
    env = dict(os.environ, TS_RUNS_DIR=str(tmp_path), OMP_NUM_THREADS="1", COLUMNS="200")
    sets = [x for o in tiny_overrides for x in ("--set", o)]
    out = subprocess.run(
        [*TS, "train", "--preset", "tiny", "--run-id", run_id, *sets, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return (out.stdout + out.stderr).splitlines()


def _iteration_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if re.search(r"\biteration \d+: reward/mean", line)]


# Prefect mode (a flow run through its server, ~25 s) runs with the slow tests: the default suite must stay
# under 3 minutes on 2 cores; the filter it relies on is unit-tested in tests/unit/test_cli_output_lines.py.
@pytest.mark.parametrize("mode", [pytest.param("prefect", marks=pytest.mark.slow), "plain"])
def test_one_line_per_iteration_and_the_prepare_stage_speaks_first(tmp_path, tiny_overrides, mode):
    lines = _train(tmp_path, tiny_overrides, f"out-{mode}", *(["--no-prefect"] if mode == "plain" else []))
    its = _iteration_lines(lines)
    assert [re.search(r"iteration (\d+):", line).group(1) for line in its] == ["0", "1"], lines
    assert not [line for line in lines if "Finished in state" in line and "Task run" in line], lines
    start = next(i for i, line in enumerate(lines) if "prepare: config.yaml, the data splits" in line)
    done = next(i for i, line in enumerate(lines) if re.search(r"prepare done in [\d.]+ s \(data", line))
    assert start < done < lines.index(its[0])  # before anything else of the run
    assert sum("θ_0: eval/accuracy" in line for line in lines) == 1
    if mode == "prefect":  # Prefect's own lines around the flow: a handful, not one per task run
        prefect = [
            line
            for line in lines
            if re.match(r"\d\d:\d\d:\d\d\.\d+ \| ", line) and "samples (" not in line  # not evaluation progress
        ]
        assert any("samples (" in line for line in lines), lines  # an evaluation's progress shows in this mode too
        assert len(prefect) <= 12, prefect


@pytest.mark.slow  # a second Prefect run (the filter itself: tests/unit/test_cli_output_lines.py)
def test_verbose_prints_every_task_runs_line(tmp_path, tiny_overrides):
    lines = _train(tmp_path, tiny_overrides, "out-verbose", "--verbose")
    finished = [line for line in lines if "Task run" in line and "Finished in state" in line]
    assert len(finished) >= 2 + 2 * 6, lines  # prepare, θ_0's evaluation and every stage of both iterations
    assert len(_iteration_lines(lines)) == 2
