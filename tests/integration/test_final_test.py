"""`python -m thinking_seeds.pipeline.loop --final-test`: a comparison run evaluates its final policy (and θ_0) on the
whole test split right after training, so a comparison stopped half-way has test numbers."""

import pyarrow.parquet as pq

from tests.helpers.tiny import TINY_OVERRIDES
from thinking_seeds.pipeline import session
from thinking_seeds.pipeline.checkpoint_eval import EQUAL_ITERATIONS_STAGE, FINAL_TEST_STAGE
from thinking_seeds.pipeline.loop import main
from thinking_seeds.pipeline.run_resources import held_resources
from thinking_seeds.store.run_dir import RunDir


def test_final_test_after_training(tmp_path, tiny_model_dir, capsys, monkeypatch):
    args = [
        "--preset",
        "tiny",
        "--run-id",
        "ft",
        "--runs-dir",
        str(tmp_path),
        "--final-test",
        "--final-test-base",
        "--equal-iterations",
        "1",
        "--set",
        f"model.path={tiny_model_dir}",
        "--set",
        "eval.test_samples=4",
        "--set",
        "eval.seeded=false",
    ]
    for o in TINY_OVERRIDES:
        args += ["--set", o]
    loads: list = []
    build = session.build_engine
    monkeypatch.setattr(session, "build_engine", lambda *a, **k: loads.append(a) or build(*a, **k))
    main(args)
    run = RunDir.for_run("ft", tmp_path)
    # the final tests run in the run's life, with its engine: one model load; then the run's close let go of it
    assert len(loads) == 1 and held_resources(run) is None
    for step in (0, 2):
        m = {r["name"]: r["value"] for r in pq.read_table(run.metrics(step, FINAL_TEST_STAGE)).to_pylist()}
        assert m["eval/prompts"] == 8 and "eval/pass@4" in m  # the whole test split, k up to test_samples
        rows = pq.read_table(run.root / "evals" / FINAL_TEST_STAGE / f"step_{step:06d}.parquet").to_pylist()
        assert len(rows) == 8 and all(r["n"] == 4 for r in rows)
    # θ_1 too, as a run given more iterations to match compute is tested at the others' count
    m = {r["name"]: r["value"] for r in pq.read_table(run.metrics(1, EQUAL_ITERATIONS_STAGE)).to_pylist()}
    assert m["eval/prompts"] == 8 and "eval/pass@4" in m
    out = capsys.readouterr().out
    assert "final test θ_0" in out and "final test θ_2" in out and f"{EQUAL_ITERATIONS_STAGE} θ_1" in out
    main(args)  # resumed: nothing is evaluated again
    assert "final test" not in capsys.readouterr().out
