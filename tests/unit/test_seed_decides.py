"""The statistics of `thinking_seeds.experiments.seed_decides` on a tiny synthetic game24 run directory
whose answers are known: seeded vs draft success, success after a wrong draft / a dead prefix, and
the share of surprisal in the first tokens."""

import json

import pyarrow as pa
import pytest

from thinking_seeds.data import game24
from thinking_seeds.data.game24_data import build_game24_splits
from thinking_seeds.data.sources import load_dataset
from thinking_seeds.experiments.seed_decides import main, seed_stats
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.schemas import PREFIX_SCHEMA, ROLLOUT_SCHEMA


def _prefix(pid, step, ids, text, draft):
    return dict(run_id="r", iteration=0, prompt_id=pid, seed_id=f"s{ids[0]}", source_step=step, source_age=1,
                prefix_ratio=0.3, prefix_token_ids=ids, behaviour_logprobs=[-1.0] * len(ids), prefix_text=text,
                draft_len=20, draft_reward=draft)  # fmt: skip


def _rollout(pid, kind, step, ids, plen, logps, reward):
    return dict(run_id="r", iteration=0, prompt_id=pid, sample_id=0, kind=kind, source_step=step, prefix_len=plen,
                prompt_token_ids=[0], token_ids=ids, old_logprobs=logps, behaviour_logprobs=[0.0] * len(ids),
                response_text="x", answer=None, status="ok" if reward else "wrong", reward=reward,
                advantage=None)  # fmt: skip


@pytest.fixture
def run_dir(tmp_path):
    root = tmp_path / "run"
    build_game24_splits(root / "data", 3, 2, 2, seed=1234)
    (root / "config.yaml").write_text("data: {source: game24}\n")
    p = load_dataset(root / "data" / "train.parquet")[0]
    numbers = json.loads(p.rg_entry)["metadata"]["numbers"]
    live = game24.solutions(numbers)[0].split("\n")[0] + "\n"
    dead = next(
        f"{a}+{b}={a + b}\n"
        for i, a in enumerate(numbers)
        for j, b in enumerate(numbers)
        if i < j and not game24.partial_state(numbers, f"{a}+{b}={a + b}\n").reachable
    )
    assert game24.partial_state(numbers, live).reachable
    invalid = f"{numbers[0]}+{numbers[1]}={numbers[0] + numbers[1] + 1}\n"  # wrong arithmetic
    seeds = [_prefix(p.prompt_id, 0, [7, 7], live, 1.0), _prefix(p.prompt_id, 0, [8, 8, 8], dead, 0.0)]
    # a draft stopped at its cut (prefix.ratio_of=budget) has no reward; its prefix is still classified
    seeds.append(_prefix(p.prompt_id, 0, [6, 6], invalid, None))
    rows = [
        _rollout(p.prompt_id, "on_policy", None, list(range(20)), 0, [-3.0] * 4 + [-0.25] * 16, 1.0),
        _rollout(p.prompt_id, "on_policy", None, list(range(20)), 0, [-3.0] * 4 + [-0.25] * 16, 0.0),
        _rollout(p.prompt_id, "seeded", 0, [7, 7, 1, 2], 2, [-1.0] * 4, 1.0),  # live prefix, right draft
        _rollout(p.prompt_id, "seeded", 0, [7, 7, 3, 4], 2, [-1.0] * 4, 0.0),
        _rollout(p.prompt_id, "seeded", 0, [8, 8, 8, 1], 3, [-1.0] * 4, 0.0),  # dead prefix, wrong draft
        _rollout(p.prompt_id, "seeded", 5, [9, 9, 1], 2, [-1.0] * 3, 1.0),  # its seed is not in the corpus
        _rollout(p.prompt_id, "seeded", 0, [6, 6, 2], 2, [-1.0] * 3, 1.0),  # invalid prefix, unscored draft
    ]
    write_table_atomic(pa.Table.from_pylist(seeds, schema=PREFIX_SCHEMA),
                       root / "corpus/prefixes/iteration=0/prefixes.parquet", schema=PREFIX_SCHEMA)  # fmt: skip
    write_table_atomic(pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA),
                       root / "rollouts/iteration=0/rollouts.parquet", schema=ROLLOUT_SCHEMA)  # fmt: skip
    return root


def test_seed_stats_on_a_known_run(run_dir):
    s = seed_stats(run_dir, first_tokens=4)
    assert s["on_policy_success"] == 0.5 and s["seeded_samples"] == 5 and s["seeded_unmatched"] == 1
    assert s["seeded_unscored_draft"] == 1 and (
        s["seeded_after_invalid_prefix"],
        s["seeded_after_invalid_prefix_n"],
    ) == (
        1.0,
        1,
    )
    # the live and the dead prefix hold one valid step each, the invalid one none
    one, zero = s["by_prefix_steps"]["1"], s["by_prefix_steps"]["0"]
    assert one["n"] == 3 and one["live_share"] == pytest.approx(2 / 3) and one["success_after_live"] == 0.5
    assert one["dead_share"] == pytest.approx(1 / 3) and one["success_after_dead"] == 0.0
    assert zero == {"n": 1, "live_share": 0.0, "dead_share": 0.0, "invalid_share": 1.0} | {
        "success_after_live": None,
        "success_after_dead": None,
        "success_after_invalid": 1.0,
    }
    assert s["seeded_success"] == pytest.approx(1 / 3) and s["draft_success"] == pytest.approx(2 / 3)
    assert (s["seeded_after_wrong_draft"], s["seeded_after_wrong_draft_n"]) == (0.0, 1)
    assert (s["seeded_after_right_draft"], s["seeded_after_right_draft_n"]) == (0.5, 2)
    assert (s["seeded_after_dead_prefix"], s["seeded_after_dead_prefix_n"]) == (0.0, 1)
    assert (s["seeded_after_live_prefix"], s["seeded_after_live_prefix_n"]) == (0.5, 2)
    assert s["entropy_share_first_tokens"] == pytest.approx(12 / 16) and s["even_share"] == pytest.approx(0.2)


def test_the_cli_prints_the_figures_and_refuses_a_non_run(run_dir, tmp_path, capsys):
    main([str(run_dir), "--first-tokens", "4"])
    out = capsys.readouterr().out
    assert "after a dead / live prefix   0.000 (n=1) / 0.500 (n=2)" in out and "0.750 of the total" in out
    assert "after an invalid step         1.000 (n=1;" in out and "  1 step(s), n=3 " in out
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "nothing")])
    assert e.value.code == 2 and "no rollouts/" in capsys.readouterr().err


def test_several_runs_give_one_row_each_and_their_mean(run_dir, tmp_path, capsys):
    import shutil

    other = tmp_path / "run2"
    shutil.copytree(run_dir, other)
    main([str(run_dir), str(other), "--first-tokens", "4"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | on-policy success |") and len(lines) == 5
    # both runs have the fixture's numbers: live / dead / invalid 2/4, 1/4, 1/4 of the classified seeds
    # then its one group, mixed and seeded, and its off-policy tokens: 11 prefix tokens of 58
    row = (
        "| 0.500 | 5 | 0.333 | 0.667 | 0.000 | 0.500 / 0.250 / 0.250 | 0.500 / 0.000 / 1.000 | 0.750 "
        "| 1.000 / 1.000 | 0.190 |"
    )
    assert lines[2] == f"| run {row}" and lines[3] == f"| run2 {row}"
    assert lines[4].startswith("| mean of 2 runs | 0.500 | 5.000 | 0.333 |")


def test_saved_statistics_give_the_same_table_as_the_run_folders(run_dir, tmp_path, capsys):
    """A run folder is gone after its session; its `--json` statistics are kept and tabled instead."""
    import shutil

    other = tmp_path / "run2"
    shutil.copytree(run_dir, other)
    saved = []
    for d in (run_dir, other):
        main([str(d), "--first-tokens", "4", "--json"])
        saved.append(tmp_path / f"{d.name}.json")
        saved[-1].write_text(capsys.readouterr().out)
    main([str(run_dir), str(other), "--first-tokens", "4"])
    from_dirs = capsys.readouterr().out
    assert from_dirs.count("\n") == 5  # header, rule, two runs, mean
    main([str(p) for p in saved])
    assert capsys.readouterr().out == from_dirs
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "bad.json")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "not one run's statistics" in err and err.count("\n") == 1


def test_the_archive_keeps_the_statistics_and_the_report_section_reads_them(run_dir, tmp_path):
    """The archive does not keep rollouts: it keeps the run's statistics, which a report written from
    a restored copy reads (the same table as from the live run); a run without seeds has no row."""
    from thinking_seeds.experiments.archive import archive_run
    from thinking_seeds.experiments.seed_decides import STATS_FILE, run_stats, seed_decides_section

    live = seed_stats(run_dir)
    assert run_stats(run_dir) == live
    archive_run(run_dir, tmp_path / "archive", "h", final_test=False)
    kept = tmp_path / "archive" / run_dir.name
    assert json.loads((kept / STATS_FILE).read_text()) == live and not (kept / "rollouts").exists()
    assert run_stats(kept) == live
    unseeded = tmp_path / "grpo"
    (unseeded / "rollouts").mkdir(parents=True)
    assert run_stats(unseeded) is None
    section = seed_decides_section({"thinking_seeds": {"kept": kept, "live": run_dir}, "grpo": {"grpo": unseeded}})
    assert section[0] == "## Does the seed decide? (per seeded run)"
    table = "\n".join(section)
    assert "### thinking_seeds" in table and "### grpo" not in table and "| grpo |" not in table
    assert "| kept | 0.500 | 5 |" in table and "| live | 0.500 | 5 |" in table and "| mean of 2 runs |" in table


def test_mixed_groups_and_the_off_policy_token_share(run_dir):
    """Groups are (iteration, prompt): iteration 0's group is mixed and holds seeds; iteration 1's is
    all wrong (no gradient) and holds a whole off-policy draft, whose every token counts as off-policy."""
    pid = load_dataset(run_dir / "data" / "train.parquet")[0].prompt_id
    rows = [
        dict(_rollout(pid, "on_policy", None, [1, 2, 3, 4], 0, [-1.0] * 4, 0.0), iteration=1),
        dict(_rollout(pid, "on_policy", None, [1, 2, 3, 4], 0, [-1.0] * 4, 0.0), iteration=1, sample_id=1),
        dict(_rollout(pid, "offpolicy_full", 0, [5, 5, 5, 5, 5], 5, [-1.0] * 5, 0.0), iteration=1, sample_id=2),
    ]
    write_table_atomic(pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA),
                       run_dir / "rollouts/iteration=1/rollouts.parquet", schema=ROLLOUT_SCHEMA)  # fmt: skip
    s = seed_stats(run_dir, first_tokens=4)
    assert (s["groups"], s["seeded_groups"]) == (2, 1)
    assert (s["mixed_group_share"], s["seeded_mixed_group_share"]) == (0.5, 1.0)
    # seeds' prefixes 2 + 2 + 3 + 2 + 2 and the whole 5-token draft, of 58 + 13 response tokens
    assert s["off_policy_token_share"] == pytest.approx(16 / 71)
