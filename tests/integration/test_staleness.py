"""pipeline.max_staleness (bounded-staleness rollouts: pipeline/groups_ahead.py) on real tiny runs.

- With max_staleness=1 the groups of iteration k are sampled by θ_{k-1} (θ_0 at k=0): every generated
  row says so in policy_version, and its stored old log-probs are θ_{k-1}'s own, rescored from the
  checkpoint, not θ_k's -- the ratio is taken against the policy that wrote the sample.
- Groups 1 and 2 really were sampled while updates 0 and 1 ran, and a run that samples them in the
  continuation stage instead (nothing ahead) ends with the same weights, rollouts and prefixes;
  groups held for another policy or other seeds are not taken.
- kill -9 in update 1 (blocked at θ_2's checkpoint rename; groups 2, sampled ahead beside it, are only
  in memory), then resume: the completed stages are reused and the results equal the uninterrupted
  run's.
- The key is part of the config hash when non-zero, and the combinations it cannot honour are refused.

Kill -9 and resume under Prefect (groups sampled ahead in a thread of the flow): e2e/test_staleness_flow.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.helpers.resume import _assert_same_results, kill_and_resume
from tests.helpers.tiny import MOVING, TINY_RUN_ID, copy_run
from thinking_seeds.config import load_config
from thinking_seeds.engine.models import load_model
from thinking_seeds.engine.scoring import score_responses
from thinking_seeds.pipeline import loop, run_lifecycle
from thinking_seeds.pipeline.groups_ahead import GroupsAhead, put_groups, take_groups
from thinking_seeds.pipeline.policy_chain import policy_id
from thinking_seeds.pipeline.rows import PrefixRow, RolloutRow, read_rows
from thinking_seeds.pipeline.session import Session
from thinking_seeds.store.run_dir import RunDir

STALE = ["iterations=3", "pipeline.max_staleness=1"]


@pytest.fixture(scope="module")
def stale_run(tmp_path_factory, tiny_overrides) -> SimpleNamespace:
    overrides = tiny_overrides + MOVING + STALE
    cfg = load_config("tiny", overrides)
    run = loop.train(RunDir.for_run(TINY_RUN_ID, tmp_path_factory.mktemp("stale-run")), cfg)
    return SimpleNamespace(run=run, cfg=cfg, overrides=overrides)


def _on_policy_scores(run: RunDir, k: int, step: int, temperature: float) -> tuple[list[RolloutRow], list]:
    rows = [r for r in read_rows(RolloutRow, run.rollouts(k)) if r.kind == "on_policy"]
    model, tok = load_model(run.policy(step))
    with torch.no_grad():
        sc = score_responses(
            model,
            [r.prompt_token_ids for r in rows],
            [r.token_ids for r in rows],
            pad_id=tok.pad_token_id,
            temperature=temperature,
            with_entropy=False,
        )
    return rows, [sc.logprobs[i, : len(r.token_ids)] for i, r in enumerate(rows)]


def test_each_sample_is_written_and_scored_by_the_policy_one_step_older(stale_run):
    run, cfg = stale_run.run, stale_run.cfg
    for k in range(3):
        versions = {r.policy_version for r in read_rows(RolloutRow, run.rollouts(k))}
        assert versions == {max(0, k - 1)}, (k, versions)
    temp = cfg.rollout.temperature
    rows, writer = _on_policy_scores(run, 2, 1, temp)  # iteration 2 was sampled by θ_1
    _, current = _on_policy_scores(run, 2, 2, temp)
    assert rows and all(r.token_ids for r in rows)
    gap_writer = max((torch.tensor(r.old_logprobs) - w).abs().max().item() for r, w in zip(rows, writer, strict=True))
    gap_current = max((torch.tensor(r.old_logprobs) - c).abs().max().item() for r, c in zip(rows, current, strict=True))
    assert gap_writer < 1e-4, gap_writer  # the stored π_old is the writer's (float32 on both sides)
    assert gap_current > 1e-3, gap_current  # and not θ_2's: the weights moved between them


def test_groups_sampled_ahead_equal_groups_sampled_in_their_stage(stale_run, tmp_path, monkeypatch):
    run = stale_run.run
    for k in (1, 2):
        assert run.read_manifest(k, "continuation").metrics.get("perf/sampled_ahead") == 1.0, k
        assert run.read_manifest(k, "continuation").metrics["rollout/staleness"] == 1.0
    assert "perf/sampled_ahead" not in run.read_manifest(0, "continuation").metrics  # θ_0: nothing before it
    monkeypatch.setattr(run_lifecycle, "staleness_due", lambda cfg, k: False)  # every group sampled in its stage
    other = loop.train(RunDir.for_run(TINY_RUN_ID, tmp_path), stale_run.cfg)
    assert all("perf/sampled_ahead" not in other.read_manifest(k, "continuation").metrics for k in range(3))
    _assert_same_results(other, run, 3)


def test_groups_sampled_ahead_by_another_policy_or_from_other_seeds_are_not_used(stale_run, tmp_path):
    run = copy_run(stale_run.run, tmp_path)
    s = Session(run, stale_run.cfg)
    seeds = read_rows(PrefixRow, run.prefixes(2))
    rows = read_rows(RolloutRow, run.generated(2))
    put_groups(s, 2, GroupsAhead(rows, 0, policy_id(run, 2), seeds, {}))  # θ_2's: not iteration 2's writer
    assert take_groups(s, 2, seeds) is None
    put_groups(s, 2, GroupsAhead(rows, 0, policy_id(run, 1), seeds[1:], {}))
    assert take_groups(s, 2, seeds) is None  # other seeds
    put_groups(s, 2, GroupsAhead(rows, 0, policy_id(run, 1), seeds, {}))
    assert take_groups(s, 2, seeds) is not None and take_groups(s, 2, seeds) is None  # taken once


def test_kill_in_update_while_sampling_ahead_then_resume(stale_run, runs_dir, subprocess_env, tmp_path):
    kill_and_resume("loop", "update:1", stale_run, runs_dir, subprocess_env, tmp_path, iterations=3)


def test_staleness_is_hashed_and_what_it_cannot_honour_is_refused(tiny_overrides):
    sync = load_config("tiny", tiny_overrides)
    assert load_config("tiny", tiny_overrides + ["pipeline.max_staleness=0"]).config_hash() == sync.config_hash()
    assert load_config("tiny", tiny_overrides + ["pipeline.max_staleness=1"]).config_hash() != sync.config_hash()
    refused = {
        "update.recompute_old_logprobs=true": "nothing would account for their age",
        "cluster=ray": "set cluster=local",
    }
    for extra, why in refused.items():
        with pytest.raises(ValueError, match=why):
            load_config("tiny", tiny_overrides + ["pipeline.max_staleness=1", extra])
    decoupled = ["pipeline.max_staleness=1", "loss.rollout_correction=token_tis"]  # π_old = θ_k, weighed to the writer
    assert load_config("tiny", tiny_overrides + decoupled).update.recompute_old_logprobs
