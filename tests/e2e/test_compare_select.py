"""End to end (slow): `ts compare --select` trains the lr grid for every method on validation, writes
the choice into protocol.json before the confirmatory runs, and runs them with it; the selection
never touches the test split. A changed protocol is then refused. GRPO gets one iteration more
(`--method-set grpo:iterations=3`, compute matching) in the selection and the comparison alike, and
the selection runs skip their in-training evaluations (`--select-set eval.every=1000`)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from tests.helpers.tiny import TINY_OVERRIDES
from thinking_seeds.experiments import equal_iterations
from thinking_seeds.experiments.selection import SELECT_STAGE
from thinking_seeds.flows.cli import app

pytestmark = pytest.mark.slow  # 4 selection runs, 4 validation evaluations, 2 runs with their final test

runner = CliRunner()


def test_select_on_validation_then_compare(tmp_path, tiny_model_dir):
    runs, out = tmp_path / "runs", tmp_path / "results"
    args = ["compare", "--methods", "grpo,thinking_seeds", "--seeds", "0", "--id", "sel", "--out", str(out)]
    args += ["--no-prefect", "--no-control", "--parallel", "2", "--select", "lr=1e-4,1e-3", "--select-seeds", "0"]
    args += ["--method-set", "grpo:iterations=3", "--select-set", "eval.every=1000"]
    for o in [f"model.path={tiny_model_dir}", *TINY_OVERRIDES, "data.val_size=128"]:
        args += ["--set", o]
    env = {"TS_RUNS_DIR": str(runs), "COLUMNS": "200"}
    r = runner.invoke(app, args, env=env)
    assert r.exit_code == 0, r.output

    rec = json.loads((out / "sel" / "protocol.json").read_text())
    sel = rec["protocol"]["selection"]
    assert (sel["key"], sel["grid"], sel["split"], sel["prompts"], sel["samples"]) == (
        "update.lr",
        ["1e-4", "1e-3"],
        "validation",
        128,
        32,
    )
    assert set(sel["scores"]) == {"grpo", "thinking_seeds"} and all(len(v) == 2 for v in sel["scores"].values())
    assert rec["runs_started_before_registration"] == []  # registered after the selection, before the runs
    final = {"grpo": 3, "thinking_seeds": 2}  # grpo's own iterations
    for method in ("grpo", "thinking_seeds"):
        for value in ("1e-4", "1e-3"):
            root = runs / f"sel-select-{method}-update.lr={value}-s0"
            # only θ_0 and the final policy were evaluated in training (eval.every=1000)
            assert sorted(p.parent.name for p in root.glob("metrics/iteration=*/evaluate.parquet")) == [
                "iteration=0",
                f"iteration={final[method]}",
            ]
            # validation only: no final test, no test-split per-prompt file
            assert (
                not list(root.glob("metrics/iteration=*/final-test.parquet"))
                and not (root / "evals/final-test").exists()
            )
            m = {
                x["name"]: x["value"]
                for x in pq.read_table(root / f"metrics/iteration={final[method]}/{SELECT_STAGE}.parquet").to_pylist()
            }
            assert m["eval/accuracy"] == pytest.approx(sel["scores"][method][value]["0"])
        scores = {v: s["0"] for v, s in sel["scores"][method].items()}
        best = max(["1e-4", "1e-3"], key=lambda v: (scores[v], -["1e-4", "1e-3"].index(v)))
        assert sel["chosen"][method] == best
        cfg = yaml.safe_load((runs / f"sel-{method}-s0" / "config.yaml").read_text())
        assert cfg["update"]["lr"] == float(best)  # the confirmatory run carries its method's choice
        assert cfg["iterations"] == final[method] and cfg["eval"]["every"] != 1000
        assert (runs / f"sel-{method}-s0" / f"metrics/iteration={final[method]}/final-test.parquet").exists()
    md = (out / "sel" / "report.md").read_text()
    assert "before the first run started" in md and "Selected on validation" in md
    assert "Iterations set per method to match compute" in md and "grpo 3, thinking_seeds 2" in md
    # GRPO's θ_2 was tested in its own job, like its final policy (the compute-matched method at the
    # others' iteration count); the report pairs it with thinking_seeds' final test by seed.
    assert (runs / "sel-grpo-s0" / "metrics" / "iteration=2" / "final-test-equal-iterations.parquet").is_file()
    assert "### Every endpoint at equal iterations: grpo at θ_2" in md
    assert "| thinking_seeds − grpo | test pass@1 | +0.0000 (p —, n 1) | +0.0000 (p —, n 1) |" in md
    # The stand-alone command finds it done and keeps it in the comparison's archive.
    eq = ["--id", "sel", "--method", "grpo", "--step", "2", "--against", "thinking_seeds", "--runs-dir", str(runs)]
    assert equal_iterations.main([*eq, "--finished-only", "--archive", "--results", str(out)]) == 0
    assert (out / "sel" / "runs" / "sel-grpo-s0" / "archive.json").is_file()

    # The same command again trains nothing; another grid is a changed protocol: refused.
    r = runner.invoke(app, args, env=env)
    assert r.exit_code == 0 and "already complete" in r.output, r.output
    i = args.index("lr=1e-4,1e-3")
    r = runner.invoke(app, [*args[:i], "lr=1e-4,3e-3", *args[i + 1 :]], env=env)
    assert r.exit_code == 2 and "--amend-protocol" in r.output, r.output
