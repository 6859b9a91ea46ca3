"""The training time of a run (the SFT control's budget, the report's "train seconds"): seeds sampled
in a thread beside the update are not counted twice."""

from thinking_seeds.experiments.members import train_seconds
from thinking_seeds.store.run_dir import RunDir


def _iteration(run: RunDir, k: int, ahead: bool) -> None:
    run.write_metrics(
        k,
        "seeds",
        {"time/seeds/generation": 5.0, "time/seeds/io": 0.25, "seeds/mean_prefix_len": 9.0}
        | ({"perf/seeds_ahead": 1.0} if ahead else {}),
    )
    run.write_metrics(k, "continuation", {"time/continuation/generation": 2.0})
    run.write_metrics(k, "update", {"time/update/update_total": 7.0})
    run.write_metrics(k, "evaluate", {"time/evaluate/generation": 100.0, "eval/accuracy": 0.5})


def test_seeds_sampled_beside_the_update_count_once(tmp_path):
    seeded = RunDir(tmp_path / "cmp-thinking_seeds-s0")
    _iteration(seeded, 0, ahead=False)  # iteration 0's seeds wait for θ_0: on the critical path
    _iteration(seeded, 1, ahead=True)  # drafted while update 0 ran: only the stage's io is its own time
    plain = RunDir(tmp_path / "cmp-grpo-s0")
    plain.write_metrics(0, "continuation", {"time/continuation/generation": 3.0})
    plain.write_metrics(0, "final-test", {"time/evaluate/generation": 50.0})
    got = train_seconds([seeded.run_id, plain.run_id, "cmp-absent-s0"], tmp_path)
    # iteration 0: 5 + 0.25 + 2 + 7; iteration 1: 0.25 + 2 + 7 (its 5 s ran beside update 0); no evaluations
    assert got == {seeded.run_id: 14.25 + 9.25, plain.run_id: 3.0}


def test_evaluations_filed_later_or_under_other_stages_are_not_training(tmp_path):
    """An earlier checkpoint tested after the run (equal_iterations.py) and the selection's validation
    write `time/evaluate/*` under stages of their own; the budget (the SFT control's) ignores them."""
    run = RunDir(tmp_path / "cmp-grpo-s0")
    run.write_metrics(3, "update", {"time/update/update_total": 7.0})
    run.write_metrics(2, "final-test-equal-iterations", {"time/evaluate/generation": 280.0})
    run.write_metrics(3, "select-validation", {"time/evaluate/generation": 90.0})
    assert train_seconds([run.run_id], tmp_path) == {run.run_id: 7.0}


def test_a_long_run_of_many_small_files_fits_in_little_memory(tmp_path, monkeypatch):
    """A full-length run keeps one metrics file per stage and iteration. The old query (a correlated
    EXISTS over the whole metrics view) needed DuckDB memory that grew with the number of files: it ran
    out of 2 GB on game24-main's 35 runs, out of 64 MB on one real 150-iteration run (613 files), and
    out of 32 MB on this 60-iteration one (300 files), where the filtered join needs a few MB."""
    import thinking_seeds.store.sql as sql

    monkeypatch.setattr(sql, "MEMORY_LIMIT", "32MB")
    run = RunDir(tmp_path / "cmp-thinking_seeds-s0")
    noise = {f"update/stat_{i}": float(i) for i in range(40)}  # an update stage logs dozens of metrics
    for k in range(60):
        _iteration(run, k, ahead=k > 0)
        run.write_metrics(k, "verify", {"time/verify/total": 1.0} | noise)
    # iteration 0: 5 + 0.25 + 2 + 7 + 1; each later one: 0.25 + 2 + 7 + 1
    assert train_seconds([run.run_id], tmp_path) == {run.run_id: 15.25 + 59 * 10.25}
