"""Credit for seeded samples (issue #9): several continuations per seed, the same-seed baseline,
and keeping only seeds whose draft was correct. One iteration on the bundled tiny model."""

from collections import defaultdict

import pytest

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

BASE = [
    "iterations=1",
    "rollout.prompts_per_iteration=6",
    "rollout.group_size=8",
    "rollout.seeds_per_group=4",
    "data.train_size=60",
    "data.val_size=8",
    "data.test_size=8",
    "eval.prompts=4",
    "eval.samples=2",
    "eval.seeded=false",
]


@pytest.fixture(scope="module")
def credit_run(tmp_path_factory):
    cfg = load_config("tiny", BASE + ["rollout.continuations_per_seed=2", "advantage.baseline=same_seed"])
    return train(RunDir.for_run("credit", tmp_path_factory.mktemp("runs")), cfg), cfg


def test_two_continuations_per_seed_and_same_seed_baseline(credit_run):
    run, cfg = credit_run
    seeds = read_table(run.prefixes(0)).to_pylist()
    assert len(seeds) == 6 * 2  # 4 seeded samples per prompt / 2 continuations = 2 drafts per prompt
    rows = read_table(run.rollouts(0)).to_pylist()
    by_seed = defaultdict(list)
    on_policy = defaultdict(list)
    for r in rows:
        if r["kind"] == "seeded":
            by_seed[(r["prompt_id"], (r["sample_id"] - 4) // 2)].append(r)
        else:
            on_policy[r["prompt_id"]].append(r)
    assert all(len(g) == 2 for g in by_seed.values()) and len(by_seed) == 12
    for g in by_seed.values():
        # both continue one prefix, and each is judged only against the other
        assert (
            g[0]["prefix_len"] == g[1]["prefix_len"]
            and g[0]["token_ids"][: g[0]["prefix_len"]] == g[1]["token_ids"][: g[1]["prefix_len"]]
        )
        assert g[0]["advantage"] + g[1]["advantage"] == pytest.approx(0.0, abs=1e-5)
        if g[0]["reward"] == g[1]["reward"]:
            assert g[0]["advantage"] == 0.0
        else:
            assert (g[0]["advantage"] > 0) == (g[0]["reward"] > g[1]["reward"])
    for g in on_policy.values():  # the on-policy samples form their own group
        assert sum(r["advantage"] for r in g) == pytest.approx(0.0, abs=1e-5)


def test_correct_draft_filter_replaces_wrong_drafts_with_on_policy_samples(tmp_path):
    cfg = load_config("tiny", BASE + ["prefix.filter=correct_draft"])
    run = train(RunDir.for_run("filtered", tmp_path), cfg)
    seeds = {(r["prompt_id"], int(r["seed_id"].rsplit("-", 1)[1])): r for r in read_table(run.prefixes(0)).to_pylist()}
    rows = read_table(run.rollouts(0)).to_pylist()
    wrong = [k for k, r in seeds.items() if r["draft_reward"] < 1.0]
    right = [k for k, r in seeds.items() if r["draft_reward"] >= 1.0]
    assert wrong and right, "the bundled model should write both correct and wrong drafts on 6 prompts x 4"
    kinds = {(r["prompt_id"], r["sample_id"] - 4): r["kind"] for r in rows if r["sample_id"] >= 4}
    assert all(kinds[k] == "on_policy" for k in wrong) and all(kinds[k] == "seeded" for k in right)
    assert sum(1 for r in rows if r["prompt_id"] == rows[0]["prompt_id"]) == 8  # groups keep their size


def test_same_seed_needs_several_continuations():
    with pytest.raises(ConfigError, match="continuations_per_seed >= 2"):
        load_config("tiny", ["advantage.baseline=same_seed"])
    with pytest.raises(ConfigError, match="multiple of"):
        load_config("tiny", ["rollout.continuations_per_seed=3"])
