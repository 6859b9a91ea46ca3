"""Every run records its evaluations' time with their results: `time/evaluate/<part>` in the
evaluate metrics file (generation and verification apart; the seeded evaluation's parts with their
own names), read like any stage's time; the manifest's metrics stay the evaluation's results."""

from __future__ import annotations

from thinking_seeds.store.parquet_io import read_table


def test_a_runs_evaluations_hold_their_time(tiny_run):
    run, cfg = tiny_run.run, tiny_run.cfg
    for k in (-1, cfg.iterations - 1):  # θ_0's evaluation and the last one (seeded: eval.seeded)
        t = read_table(run.metrics(k + 1, "evaluate")).to_pydict()
        timed = {n: v for n, v in zip(t["name"], t["value"], strict=True) if n.startswith("time/evaluate/")}
        assert timed["time/evaluate/generation"] > 0 and timed["time/evaluate/verification"] > 0, timed
        assert "eval/accuracy" in t["name"]
        assert not any(n.startswith("time/") for n in run.read_manifest(k, "evaluate").metrics)
    last = read_table(run.metrics(cfg.iterations, "evaluate")).to_pydict()["name"]
    if cfg.eval.seeded:
        assert {"time/evaluate/seeded_drafts", "time/evaluate/seeded_generation"} <= set(last)
