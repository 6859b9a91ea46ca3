"""End to end (slow): `ts compare --preset countdown` on a tiny budget with the bundled plateau model
writes the claims table, the regime rows, the hard subset and the seed-age table from real runs."""

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from thinking_seeds.flows.cli import app

pytestmark = pytest.mark.slow

SMALL = [
    "iterations=2",
    "rollout.prompts_per_iteration=4",
    "data.train_size=40",
    "data.val_size=8",
    "data.test_size=16",
    "eval.prompts=8",
    "eval.samples=4",
    "eval.test_samples=8",
    "pool.snapshot_every=1",
    "eval.every=2",
]


def test_countdown_comparison_report(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "results"
    args = [
        "compare",
        "--preset",
        "countdown",
        "--methods",
        "grpo:0-1,thinking_seeds:0-1,seq_mix:0-0",
        "--id",
        "cd",
        "--out",
        str(out),
        "--parallel",
        "2",
        "--no-prefect",
        "--control-corpus",
        "300",
    ]
    for o in SMALL:
        args += ["--set", o]
    r = CliRunner().invoke(app, args, env={"TS_RUNS_DIR": str(runs), "COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    md = (out / "cd" / "report.md").read_text()
    assert "## The paper's claims on this testbed" in md
    for claim in (
        "1. beats GRPO on pass@1",
        "2. higher effective entropy",
        "3. less gradient lost to clipping",
        "4. larger explorable space",
    ):
        assert f"| {claim} |" in md
    assert "test pass@8, thinking_seeds − θ_0" in md and "### The regime" in md
    assert "### The hard subset" in md and "mean |log π_θ − log π_h| on prefix tokens by source age" in md
    # per-prompt files of the final test (θ_0 included) feed the hard subset
    base = pq.read_table(runs / "cd-grpo-s0" / "evals" / "final-test" / "step_000000.parquet").to_pylist()
    assert len(base) == 16 and all(r["n"] == 8 for r in base)
    res = {r["run_id"]: r for r in pq.read_table(out / "cd" / "results.parquet").to_pylist()}
    ts0 = res["cd-thinking_seeds-s0"]
    assert ts0["test/pass@8"] is not None and ts0["test/distinct_patterns"] is not None
    assert "hard/ever_solved" in ts0 and "actor/prefix_abs_log_ratio/age=1" in ts0
