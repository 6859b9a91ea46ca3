"""`ts eval --data` refuses, in one line and before sampling, a file with rows whose prompt plus the
response budget need more positions than the model has (a 1 MB prompt was sampled for minutes)."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from tests.helpers.tiny import copy_run
from thinking_seeds.flows.cli import app
from thinking_seeds.store.parquet_io import read_table


def _file(run, path, contents: list[str]):
    rows = read_table(run.data_dir / "test.parquet").to_pylist()[: len(contents)]
    for r, text in zip(rows, contents, strict=True):
        r["prompt"] = [{"role": "user", "content": text}]
    keep = ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    pq.write_table(pa.Table.from_pylist([{k: r[k] for k in keep} for r in rows]), path)
    return path


def _eval(run, data, *extra):
    args = ["eval", "tiny", "--data", str(data), "--no-prefect", "--runs-dir", str(run.root.parent), *extra]
    t = time.perf_counter()
    res = CliRunner().invoke(app, args)
    return res, time.perf_counter() - t


def test_rows_longer_than_the_model_are_refused_in_one_line(tiny_run, tmp_path):
    run = copy_run(tiny_run.run, tmp_path / "runs")  # max_position_embeddings=256
    data = _file(run, tmp_path / "long.parquet", ["1+1=", "9" * 300, "7" * 1_000_000])
    res, seconds = _eval(run, data)
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "2 row(s) do not fit the model: row 1" in lines[0] and "max_position_embeddings=256" in lines[0]
    assert seconds < 30
    short = _file(run, tmp_path / "short.parquet", ["1+1=", "2+2="])
    res, _ = _eval(run, short, "--max-new-tokens", "300")  # the budget alone is past the positions
    assert res.exit_code == 2 and "row 0" in res.output and "+ 300 new tokens" in res.output, res.output
