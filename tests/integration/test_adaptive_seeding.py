"""prefix.when=on_failure on a tiny run (pipeline/adaptive_seeding.py): θ_k's probe decides who gets
seeds, only correct drafts are continued, groups keep group_size samples, the cost is reported, and a
resumed run is the same run (pipeline.overlap on: e2e/test_adaptive_seeding_overlap.py).

The random tiny model earns nothing from chain_sum's checker, so a user reward function (reward.fn)
scores a response 1 when its characters' codes sum to a multiple of 3: about a third of the samples,
drafts included, are correct, so some probes fail and some drafts are right."""

from __future__ import annotations

import sys
import textwrap

import pytest

from tests.helpers.resume import _assert_same_results
from tests.helpers.tiny import TINY_OVERRIDES, copy_run
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.adaptive_seeding import probe_path
from thinking_seeds.pipeline.loop import train
from thinking_seeds.pipeline.rows import PrefixRow, RolloutRow, read_rows
from thinking_seeds.store.run_dir import RunDir

MODULE = """
def thirds(data_source, solution_str, ground_truth, extra_info):
    return 1.0 if sum(map(ord, solution_str)) % 3 == 0 else 0.0
"""
G, S = 4, 2


@pytest.fixture(scope="module")
def reward_module(tmp_path_factory):
    d = tmp_path_factory.mktemp("reward")
    (d / "thirds_reward.py").write_text(textwrap.dedent(MODULE))
    sys.path.insert(0, str(d))  # spawned verifier workers inherit sys.path
    yield "thirds_reward"
    sys.path.remove(str(d))
    sys.modules.pop("thirds_reward", None)


def overrides(tiny_model_dir, reward_module, *extra):
    return [
        f"model.path={tiny_model_dir}",
        *TINY_OVERRIDES,
        f"reward.fn={reward_module}:thirds",
        "rollout.prompts_per_iteration=8",
        f"rollout.group_size={G}",
        f"rollout.seeds_per_group={S}",
        "prefix.when=on_failure",
        "prefix.filter=correct_draft",
        "loss.entropy_coeff=0.01",
        "update.lr=1e-3",
        *extra,
    ]


@pytest.fixture(scope="module")
def adaptive_run(tmp_path_factory, tiny_model_dir, reward_module):
    cfg = load_config("tiny", overrides(tiny_model_dir, reward_module, "pipeline.overlap=false"))
    return train(RunDir.for_run("adaptive", tmp_path_factory.mktemp("adaptive")), cfg), cfg


def test_only_failing_prompts_get_seeds_and_only_from_correct_drafts(adaptive_run):
    run, cfg = adaptive_run
    seeded_anywhere = solved_anywhere = 0
    for k in range(cfg.iterations):
        rows = read_rows(RolloutRow, run.rollouts(k))
        pre = read_rows(PrefixRow, run.prefixes(k))
        probe = read_rows(RolloutRow, probe_path(run, k))
        groups: dict[str, list[RolloutRow]] = {}
        for r in rows:
            groups.setdefault(r.prompt_id, []).append(r)
        assert len(groups) == 8 and all(len(g) == G for g in groups.values())  # every group keeps G samples
        assert all([r.sample_id for r in g] == list(range(G)) for g in groups.values())
        # The probe is the first G - S on-policy samples of each group, as trained.
        assert [(r.prompt_id, r.token_ids) for r in probe] == [
            (r.prompt_id, r.token_ids) for g in groups.values() for r in g[: G - S]
        ]
        failing = {p for p, g in groups.items() if all(r.reward < 1.0 for r in g[: G - S])}
        assert {r.prompt_id for r in pre} == failing  # drafts only where the probe failed
        assert len(pre) == len(failing) * S  # continuations_per_seed=1: S drafts per failing prompt
        for p, g in groups.items():
            seeded = [r for r in g if r.kind != "on_policy"]
            assert all(r.kind == "on_policy" for r in g[: G - S])
            if p not in failing:
                assert not seeded
                solved_anywhere += 1
                continue
            correct = [d for d in pre if d.prompt_id == p and d.draft_reward >= 1.0]
            assert len(seeded) == len(correct)  # a wrong draft's slot is on-policy
            for r in seeded:  # every seed is a correct draft's prefix
                src = [d for d in correct if d.prefix_token_ids == r.token_ids[: r.prefix_len]]
                assert src and src[0].source_step == r.source_step
            seeded_anywhere += len(seeded)
        m = run.read_manifest(k, "seeds").metrics
        assert m["seeding/failed_prompts_frac"] == len(failing) / 8
        assert m["seeding/draft_tokens"] == sum(d.draft_len for d in pre)
        assert m["seeding/seeded_prompts_frac"] == len({r.prompt_id for r in rows if r.kind != "on_policy"}) / 8
        c = run.read_manifest(k, "continuation").metrics
        assert c["seeding/seeded_samples_frac"] == sum(r.kind != "on_policy" for r in rows) / len(rows)
        assert c["rollout/generated_tokens"] == sum(len(r.token_ids) - r.prefix_len for r in rows)
    assert seeded_anywhere and solved_anywhere, "the check would be vacuous: no seeds, or no solved probe"


def test_a_resumed_run_is_the_same_run(adaptive_run, tmp_path):
    """Iteration 1 from its seeds stage on, recomputed from the manifests before it (probe, drafts,
    second samples: each with its own seed), ends with the same weights, rollouts and prefixes."""
    run, cfg = adaptive_run
    again = copy_run(run, tmp_path / "resumed")
    for stage in ("seeds", "continuation", "verify", "update", "evaluate"):
        again.manifest_path(1, stage).unlink(missing_ok=True)
    _assert_same_results(train(again, cfg), run, cfg.iterations)


def test_more_drafts_per_failing_prompt_fill_the_slots_with_the_first_correct_ones(
    tmp_path, tiny_model_dir, reward_module
):
    """prefix.failure_drafts=3: 3 × S drafts per failing prompt, all in the corpus; the first correct ones
    (draw order) fill the S slots, and a slot stays on-policy only when fewer than S drafts were correct."""
    cfg = load_config(
        "tiny", overrides(tiny_model_dir, reward_module, "pipeline.overlap=false", "prefix.failure_drafts=3")
    )
    run = train(RunDir.for_run("adaptive3", tmp_path), cfg)
    seeded_anywhere = 0
    for k in range(cfg.iterations):
        rows = read_rows(RolloutRow, run.rollouts(k))
        pre = read_rows(PrefixRow, run.prefixes(k))
        failing = {r.prompt_id for r in pre}
        for p in failing:
            drafts = [d for d in pre if d.prompt_id == p]
            assert len(drafts) == 3 * S
            first_correct = [d for d in drafts if d.draft_reward >= 1.0][:S]
            seeded = [r for r in rows if r.prompt_id == p and r.kind != "on_policy"]
            assert [r.token_ids[: r.prefix_len] for r in seeded] == [d.prefix_token_ids for d in first_correct]
            seeded_anywhere += len(seeded)
        assert all(r.kind == "on_policy" for r in rows if r.prompt_id not in failing)
        assert len(rows) == 8 * G
        assert run.read_manifest(k, "seeds").metrics["seeding/draft_tokens"] == sum(d.draft_len for d in pre)
    assert seeded_anywhere, "the check would be vacuous: no seeds"
