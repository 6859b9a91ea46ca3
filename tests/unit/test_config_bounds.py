"""What was asked bounds memory (issue 51 item 5): `iterations` and the evaluation's prompts × samples have
upper bounds, refused in one line naming the key (exit 2) -- `--set iterations=10**20` and
`eval.samples=10**9` were MemoryError tracebacks -- and a run's resume line costs what the run has done,
not what its `iterations` could be."""

from __future__ import annotations

import tracemalloc

from typer.testing import CliRunner

from thinking_seeds.config import load_config
from thinking_seeds.flows.cli import app
from thinking_seeds.pipeline.resume import resume_line
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.run_dir import RunDir

runner = CliRunner()


def _refused(args: list[str], env: dict[str, str] | None = None) -> str:
    r = runner.invoke(app, args, env=env)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "Traceback" not in r.output
    return lines[0]


def test_iterations_past_the_bound_are_refused_before_anything_is_written(tmp_path):
    runs = tmp_path / "runs"
    line = _refused(
        ["train", "--run-id", "big", "--no-prefect", "--set", f"iterations={10**20}"], env={"TS_RUNS_DIR": str(runs)}
    )
    assert "iterations: Input should be less than or equal to 1000000" in line, line
    assert not (runs / "big").exists()


def test_eval_samples_past_the_bound_or_the_responses_product_are_refused():
    line = _refused(["plan", "--set", f"eval.samples={10**9}"])
    assert "eval.samples: Input should be less than or equal to 65536" in line, line
    line = _refused(["plan", "--set", "eval.samples=20000", "--set", "eval.prompts=64"])
    assert "eval.samples=20000 x eval.prompts=64 = 1,280,000 responses held at once, more than 1,048,576" in line
    assert "lower eval.samples or eval.prompts" in line
    # at the bound: accepted
    assert load_config("tiny", ["eval.samples=16384", "eval.prompts=64"]).eval.samples == 16384


def test_ts_eval_samples_past_the_bound_is_refused_before_the_run_is_read():
    line = _refused(["eval", "no-such-run", "--samples", str(10**9)])
    assert "--samples 1000000000 is more than 65,536" in line, line


def test_the_resume_line_of_a_run_of_a_million_iterations_reads_what_it_has(tmp_path):
    cfg = load_config("tiny", ["iterations=1000000"])
    run = RunDir.for_run("long", tmp_path)
    for k, stage in [(0, "prepare"), (-1, "evaluate"), (0, "snapshot")]:
        run.write_manifest(Manifest(stage=stage, iteration=k, config_hash=cfg.config_hash()))
    tracemalloc.start()
    try:
        line = resume_line(run, cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert line == "resuming long: 3 stages done, continuing at iteration 0 (seeds)"
    assert peak < 2**20, f"{peak:,} bytes to say where a 3-stage run resumes"  # a list of 6M stages: ~500 MB
