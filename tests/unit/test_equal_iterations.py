"""The equal-iterations analysis (experiments/equal_iterations.py) on hand-made runs: which checkpoint
it evaluates, what it refuses, and the paired table it prints. No training, no evaluation."""

from __future__ import annotations

import pytest

from thinking_seeds.config import ConfigError, load_config, save_config
from thinking_seeds.experiments.equal_iterations import equal_iterations_jobs, equal_iterations_table, main
from thinking_seeds.experiments.members import write_marker
from thinking_seeds.pipeline.checkpoint_eval import EQUAL_ITERATIONS_STAGE, FINAL_TEST_STAGE
from thinking_seeds.store.run_dir import RunDir


def _run(root, method, seed, iterations, checkpoints=()):
    run = RunDir.for_run(f"c-{method}-s{seed}", root)
    write_marker(run.root, {"compare_id": "c", "run_id": run.run_id, "method": method, "seed": seed, "sweep": {}})
    save_config(
        load_config("tiny", [f"iterations={iterations}", f"algorithm={method}", f"seed={seed}"]), run.config_path
    )
    for step in checkpoints:
        (run.policy_root / f"step_{step:06d}").mkdir(parents=True)
    return run


def test_jobs_evaluate_the_earlier_checkpoint_like_a_final_test_and_the_table_pairs_by_seed(tmp_path):
    grpo = {s: _run(tmp_path, "grpo", s, 5, checkpoints=(4, 5)) for s in (0, 1, 2)}
    ts = {s: _run(tmp_path, "thinking_seeds", s, 4) for s in (0, 1, 2)}
    jobs = equal_iterations_jobs("c", tmp_path, "grpo", 4)
    assert len(jobs) == 3 and not any(j.done for j in jobs)
    cmd = jobs[0].cmd
    assert cmd[cmd.index("--step") + 1] == "4" and cmd[cmd.index("--split") + 1] == "test"
    assert cmd[cmd.index("--stage") + 1] == EQUAL_ITERATIONS_STAGE and "--all-prompts" in cmd
    assert cmd[cmd.index("--samples") + 1] == str(load_config("tiny").eval.test_samples)

    for s in (0, 1, 2):  # GRPO@4 0.30/0.32/0.34; TS final 0.35/0.33/0.38: differences +0.05, +0.01, +0.04
        grpo[s].write_metrics(4, EQUAL_ITERATIONS_STAGE, {"eval/accuracy": 0.30 + 0.02 * s})
        grpo[s].write_metrics(5, FINAL_TEST_STAGE, {"eval/accuracy": 0.9})  # the compute-matched final: not read
        ts[s].write_metrics(4, FINAL_TEST_STAGE, {"eval/accuracy": [0.35, 0.33, 0.38][s]})
    assert all(j.done for j in equal_iterations_jobs("c", tmp_path, "grpo", 4))  # resumable: nothing repeated
    md = "\n".join(equal_iterations_table("c", tmp_path, "grpo", 4, ["thinking_seeds"]))
    row = next(line for line in md.splitlines() if line.startswith("| thinking_seeds − grpo@4"))
    assert "| 3 | +0.0333 [" in row and "s0: +0.050, s1: +0.010, s2: +0.040" in row


def test_refusals_are_one_line_exit_2(tmp_path, capsys):
    _run(tmp_path, "grpo", 0, 5, checkpoints=(5,))
    with pytest.raises(ConfigError, match="no checkpoint of step 4"):
        equal_iterations_jobs("c", tmp_path, "grpo", 4)
    with pytest.raises(ConfigError, match="0 < step < it"):
        equal_iterations_jobs("c", tmp_path, "grpo", 5)
    with pytest.raises(ConfigError, match="has no luffy run"):
        equal_iterations_jobs("c", tmp_path, "luffy", 4)
    rc = main(["--id", "c", "--method", "grpo", "--step", "4", "--against", "x", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "step 4" in err[0]


def test_a_comparison_in_progress_evaluates_what_finished_and_the_archive_keeps_the_result(tmp_path):
    """Run folders do not outlive a session: the finished runs are evaluated now, re-archived with
    the result, and the table reads it from the archive (a later session's restored copy)."""
    from thinking_seeds.experiments.archive import archive_run, restore
    from thinking_seeds.experiments.equal_iterations import archive_evaluated

    runs, archive = tmp_path / "runs", tmp_path / "archive"
    done = _run(runs, "grpo", 0, 5, checkpoints=(4, 5))
    done.write_metrics(5, FINAL_TEST_STAGE, {"eval/accuracy": 0.9})
    _run(runs, "grpo", 1, 5, checkpoints=(4,))  # still training: no final test yet
    planned = RunDir.for_run("c-grpo-s2", runs)  # planned, not started: a marker, no config
    write_marker(planned.root, {"compare_id": "c", "run_id": planned.run_id, "method": "grpo", "seed": 2, "sweep": {}})
    ts = _run(runs, "thinking_seeds", 0, 4)
    ts.write_metrics(4, FINAL_TEST_STAGE, {"eval/accuracy": 0.35})
    cfg_hash = load_config("tiny", ["iterations=5", "algorithm=grpo", "seed=0"]).config_hash()
    archive_run(done.root, archive, cfg_hash, True)  # archived when it finished, before the evaluation

    with pytest.raises(ConfigError, match="c-grpo-s2 has not started yet; .* --finished-only"):
        equal_iterations_jobs("c", runs, "grpo", 4)
    jobs = equal_iterations_jobs("c", runs, "grpo", 4, finished_only=True)
    assert [j.run_root.name for j in jobs] == ["c-grpo-s0"]

    done.write_metrics(4, EQUAL_ITERATIONS_STAGE, {"eval/accuracy": 0.30})  # what the job's checkpoint_eval writes
    assert archive_evaluated(jobs, archive) == ["c-grpo-s0"]
    assert archive_evaluated(jobs, archive) == []  # unchanged since: not rewritten

    later = tmp_path / "later"  # a later session: only the archive is left
    ts_hash = load_config("tiny", ["iterations=4", "algorithm=thinking_seeds", "seed=0"]).config_hash()
    archive_run(ts.root, archive, ts_hash, True)
    restore(archive, later, {"c-grpo-s0": cfg_hash, "c-thinking_seeds-s0": ts_hash})
    assert all(j.done for j in equal_iterations_jobs("c", later, "grpo", 4))  # read from the archived table
    md = "\n".join(equal_iterations_table("c", later, "grpo", 4, ["thinking_seeds"]))
    assert "| thinking_seeds − grpo@4 | 1 | +0.0500" in md


def test_the_archive_keeps_the_equal_iterations_tests_per_prompt_file(tmp_path):
    """A registered equal-iterations reading pairs the seeded arm's final test with GRPO's earlier
    checkpoint, prompt by prompt for the hard-prompt row: a later session restoring the archive must
    find that checkpoint's per-prompt file as the final test's (game24-1step-main lost the row once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from thinking_seeds.experiments.archive import archive_run, restore
    from thinking_seeds.experiments.hard_subset import per_prompt

    runs, archive, later = tmp_path / "runs", tmp_path / "archive", tmp_path / "later"
    done = _run(runs, "grpo", 0, 5, checkpoints=(4, 5))
    rows = pa.table({"prompt_id": ["p0", "p1"], "mode": ["plain", "plain"], "correct": [3, 0], "samples": [8, 8]})
    for stage, step in ((FINAL_TEST_STAGE, 5), (EQUAL_ITERATIONS_STAGE, 4)):
        (done.root / "evals" / stage).mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, done.root / "evals" / stage / f"step_{step:06d}.parquet")
    cfg_hash = load_config("tiny", ["iterations=5", "algorithm=grpo", "seed=0"]).config_hash()
    assert archive_run(done.root, archive, cfg_hash, True)
    assert restore(archive, later, {done.run_id: cfg_hash}) == [done.run_id]
    got = per_prompt(later / done.run_id, EQUAL_ITERATIONS_STAGE)
    assert got is not None and sorted(got) == ["p0", "p1"] and got["p0"]["correct"] == 3
    assert per_prompt(later / done.run_id) is not None  # the final test's, as before
