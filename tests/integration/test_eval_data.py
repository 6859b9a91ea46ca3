"""`ts eval RUN --data FILE.parquet --no-prefect` on the tiny run: the user's verl-schema file, the
run's reward or `--reward`, avg@n / pass@k / maj@k per data source, ONE JSON object, counts as ints,
and the same shape for a split evaluation."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.helpers.tiny import copy_run
from thinking_seeds.flows.cli import app
from thinking_seeds.store.parquet_io import read_table


@pytest.fixture
def run(tiny_run, tmp_path):
    return copy_run(tiny_run.run, tmp_path / "runs")  # ts eval writes into the run: a copy


def _benchmark(run, path):
    """The run's own test prompts as a user's file with two data sources (alpha, beta)."""
    rows = read_table(run.data_dir / "test.parquet").to_pylist()[:4]
    for i, r in enumerate(rows):
        r["data_source"] = "alpha" if i % 2 == 0 else "beta"
        r["extra_info"] = {"split": "mine", "index": i}
    keep = ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    pq.write_table(pa.Table.from_pylist([{k: r[k] for k in keep} for r in rows]), path)
    return path


def _eval(*args):
    r = CliRunner().invoke(app, ["eval", *args])
    assert r.exit_code == 0, r.output
    return r.stdout  # the result; progress lines go to stderr


def test_eval_on_own_data_per_source(run, tmp_path):
    data = _benchmark(run, tmp_path / "mine.parquet")
    base = str(run.root.parent)
    args = ["tiny", "--data", str(data), "--no-prefect", "--samples", "4", "--runs-dir", base]
    out = json.loads(_eval(*args, "-f", "json"))
    assert set(out) == {"run_id", "step", "data", "reward", "samples", "metrics", "by_source", "seconds", "path"}
    assert (out["run_id"], out["step"], out["samples"], out["reward"]) == ("tiny", 2, 4, "math_verify")
    m = out["metrics"]
    assert (m["prompts"], m["samples"]) == (4, 16) and sum(m["status"].values()) == 16
    assert all(type(c) is int for c in m["status"].values())
    assert sorted(out["by_source"]) == ["alpha", "beta"]
    assert [g["prompts"] for g in out["by_source"].values()] == [2, 2]
    for key in ("avg@4", "pass@1", "pass@2", "pass@4", "maj@1", "maj@2", "maj@4"):
        assert 0.0 <= m[key] <= 1.0, key
        # all prompts = the mean of the two equally large sources
        assert m[key] == pytest.approx(sum(g[key] for g in out["by_source"].values()) / 2), key
    assert m["pass@1"] <= m["pass@2"] <= m["pass@4"]
    # written: the same object as JSON, and the numbers for `ts sql`
    assert json.loads((run.root / out["path"]).read_text())["metrics"] == m
    stored = {r["name"]: r["value"] for r in read_table(run.metrics(2, "evaluate-data-mine")).to_pylist()}
    assert stored["eval/pass@4"] == m["pass@4"] and stored["eval/beta/prompts"] == 2.0

    table = _eval(*args)
    lines = table.splitlines()
    header = next(x for x in lines if "source" in x and "pass@1" in x)
    assert "maj@4" in header and "avg@4" in header
    for label in ("alpha", "beta", "all"):
        assert any(x.split("│")[1].strip() == label for x in lines if x.count("│") > 2), (label, table)
    assert "statuses:" in table and ".0000 " not in table.split("statuses:")[1].splitlines()[0]


def test_eval_own_data_with_another_reward(run, tmp_path, monkeypatch, request):
    (tmp_path / "always.py").write_text("def one(data_source, solution_str, ground_truth, extra_info):\n  return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # spawn workers inherit sys.path
    request.addfinalizer(lambda: sys.modules.pop("always", None))
    data = _benchmark(run, tmp_path / "mine.parquet")
    args = ["tiny", "--data", str(data), "--reward", "always:one", "--no-prefect", "--samples", "2", "-f", "json"]
    out = json.loads(_eval(*args, "--runs-dir", str(run.root.parent)))
    assert out["reward"] == "always:one"
    assert out["metrics"]["avg@2"] == 1.0 and out["metrics"]["pass@1"] == 1.0 and out["metrics"]["status"] == {"ok": 8}


def test_eval_errors_are_one_line(run, tmp_path):
    base = str(run.root.parent)
    r = CliRunner().invoke(app, ["eval", "tiny", "--step", "9", "--no-prefect", "--runs-dir", base])
    assert r.exit_code == 2 and "has no policy step 9 (it has 0-2)" in " ".join(r.output.split()), r.output
    r = CliRunner().invoke(app, ["eval", "tiny", "--data", str(tmp_path / "nope.parquet"), "--runs-dir", base])
    assert r.exit_code == 2 and "nope.parquet" in r.output and "Traceback" not in r.output, r.output
    # every response is held until scored: 17 prompts x 65,536 samples is refused before the model loads
    row = read_table(_benchmark(run, tmp_path / "mine.parquet")).to_pylist()[0]
    many = [{**row, "extra_info": {"split": "mine", "index": i}} for i in range(17)]
    pq.write_table(pa.Table.from_pylist(many), tmp_path / "many.parquet")
    args = ["eval", "tiny", "--data", str(tmp_path / "many.parquet"), "--samples", "65536", "--no-prefect"]
    r = CliRunner().invoke(app, [*args, "--runs-dir", base])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "17 prompts x --samples 65536 = 1,114,112 responses held at once, more than 1,048,576" in lines[0]


def test_eval_split_prints_one_object(run):
    out = json.loads(_eval("tiny", "--split", "test", "--no-prefect", "-f", "json", "--runs-dir", str(run.root.parent)))
    assert (out["step"], out["split"], out["samples"]) == (2, "test", 4)
    m = out["metrics"]
    assert type(m["prompts"]) is int and m["samples"] == 4 * m["prompts"]
    assert all(type(c) is int for c in m["status"].values()) and "avg@4" in m and "pass@4" in m
    assert "accuracy" not in m and not any(k.startswith("status_") for k in m)


def test_a_split_evaluation_past_the_responses_bound_is_refused_before_sampling(run):
    from thinking_seeds.config import ConfigError
    from thinking_seeds.pipeline.checkpoint_eval import evaluate_checkpoint

    # eval.prompts=4 validation prompts x 300,000 samples: every response would be held until scored
    with pytest.raises(ConfigError, match=r"4 validation prompts x 300000 samples = 1,200,000 responses held at once"):
        evaluate_checkpoint(run.root, None, "validation", samples=300_000)
    with pytest.raises(ConfigError, match=r"8 test prompts x 131100 samples = 1,048,800 responses"):
        evaluate_checkpoint(run.root, None, "test", all_prompts=True, samples=131_100)  # the whole split
