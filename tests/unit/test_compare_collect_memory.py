"""The report's numbers over full-length runs: a comparison's runs keep one small metrics file per
stage and iteration, and the report must read them in bounded DuckDB memory.

`collect` names the metrics a dozen times in one query; scanning the file dataset at each mention ran
out of DuckDB's 2 GB on game24-main's 38 runs (and out of 400 MB on five of them). It now reads the
comparison's rows once, into memory, and queries that."""

import pytest

from thinking_seeds.experiments.compare_data import collect
from thinking_seeds.experiments.members import write_marker
from thinking_seeds.experiments.run_spec import RunSpec
from thinking_seeds.store.run_dir import RunDir

ITERATIONS = 60


def _run(runs, method: str, seed: int) -> str:
    spec = RunSpec(f"cmp-{method}-s{seed}", "cmp", method, seed, "tiny")
    write_marker(runs / spec.run_id, spec.marker())
    run = RunDir(runs / spec.run_id)
    actor = {f"actor/{a}/{p}": 0.1 * seed for a in ("entropy", "pg_clipfrac") for p in ("all", "prefix")}
    for k in range(ITERATIONS):
        run.write_metrics(k, "continuation", {"time/continuation/generation": 2.0, "rollout/generated_tokens": 100.0})
        run.write_metrics(k, "verify", {"time/verify/total": 1.0} | {f"verify/stat_{i}": 1.0 for i in range(20)})
        run.write_metrics(k, "update", {"time/update/update_total": 7.0} | actor)
        if k % 20 == 19:
            run.write_metrics(k, "evaluate", {"eval/accuracy": 0.01 * k + seed, "time/evaluate/generation": 9.0})
    return spec.run_id


def test_the_report_reads_many_small_files_in_little_memory(tmp_path, monkeypatch):
    import thinking_seeds.store.sql as sql

    monkeypatch.setattr(sql, "MEMORY_LIMIT", "48MB")
    ids = [_run(tmp_path, m, s) for m in ("grpo", "thinking_seeds") for s in (0, 1)]
    data = collect("cmp", tmp_path)
    for run_id in ids:
        got = data["per_run"][run_id]
        seed = int(run_id[-1])
        assert got["final_step"] == ITERATIONS - 1
        assert got["eval/accuracy"] == pytest.approx(0.01 * (ITERATIONS - 1) + seed)
        assert got["budget/train_seconds"] == pytest.approx(ITERATIONS * 10.0)
        assert got["budget/generated_tokens"] == pytest.approx(ITERATIONS * 100.0)
        assert got["actor/entropy/all"] == pytest.approx(0.1 * seed)
        assert [it for it, _ in data["curves"][run_id]["eval/accuracy"]] == [19, 39, 59]
