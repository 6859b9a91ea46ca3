"""One-line refusals (issue #11, item 5) where a flow would start: `ts train` (with and without
Prefect) and the train flow itself refuse a wrongly typed data set in one line, before the run
directory exists. The library's and the config's refusals: unit/test_faults_errors.py."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.helpers.verl_data import one_line, train_args, write
from thinking_seeds.flows.cli import app
from thinking_seeds.store.parquet_io import DataError

runner = CliRunner()


@pytest.mark.parametrize("prefect", [False, True], ids=["no-prefect", "prefect"])
def test_ts_train_refuses_a_wrongly_typed_data_set_in_one_line_and_writes_nothing(tmp_path, runs_dir, prefect):
    good = write(tmp_path / "val.parquet")
    bad = write(tmp_path / "train.parquet", reward_model=['{"ground_truth": "3"}'] * 2)
    args = train_args(bad, good) + ([] if prefect else ["--no-prefect"])
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    line = one_line(r.stderr.strip())
    assert line.startswith("error: ") and str(bad) in line and "'reward_model'" in line and "has type string" in line
    assert list(runs_dir.iterdir()) == []  # no run directory, no config.yaml, no lock


def test_the_train_flow_refuses_a_bad_data_set_before_making_the_run_directory(tmp_path, runs_dir):
    """A deployment calls the flow without the CLI: the flow checks the files before its lock
    creates the run directory."""
    from thinking_seeds.flows.train import train_flow

    bad = write(tmp_path / "train.parquet", prompt=[1, 2])
    overrides = ["data.source=parquet", f"data.train_path={bad}", f"data.val_path={write(tmp_path / 'val.parquet')}"]
    with pytest.raises(DataError, match="column 'prompt' has type int64"):
        train_flow(preset="tiny", run_id="d1", overrides=overrides)
    assert list(runs_dir.iterdir()) == []
