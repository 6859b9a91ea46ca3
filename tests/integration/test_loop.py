"""The plain-Python loop on the bundled tiny model: grpo and thinking_seeds, a few iterations.

Checks the three things the foundation promises: the loss is finite, the weights change, and
seeded samples really start with a prefix written by a historical checkpoint whose behaviour
log-probs were recorded (and match that checkpoint's log-probs when re-scored).
"""

import math

import pytest
import torch
from safetensors.torch import load_file

from thinking_seeds.config import load_config
from thinking_seeds.engine.models import load_model
from thinking_seeds.engine.scoring import score_responses
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

SMALL = [
    "iterations=2",
    "rollout.prompts_per_iteration=6",
    "rollout.group_size=6",
    "data.train_size=60",
    "data.val_size=8",
    "data.test_size=8",
    "eval.prompts=4",
    "eval.samples=4",
    "pool.snapshot_every=1",
    # The loop's own checks; the default (persistent accelerate) trainer has its tests (e2e, LoRA, custom reward).
    "update.launcher=in_process",
]


def weights(path):
    return load_file(str(path / "model.safetensors"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    out = {}
    for algo in ("grpo", "thinking_seeds"):
        seeds = ["rollout.seeds_per_group=3"] if algo == "thinking_seeds" else []
        cfg = load_config("tiny", [f"algorithm={algo}"] + SMALL + seeds)
        out[algo] = train(RunDir.for_run(algo, base), cfg)
    return out


@pytest.mark.parametrize("algo", ["grpo", "thinking_seeds"])
def test_loss_finite_and_weights_change(runs, algo):
    run = runs[algo]
    norms = []
    for k in range(2):
        m = run.read_manifest(k, "update")
        assert math.isfinite(m.metrics["actor/pg_loss"])
        norms.append(m.metrics["actor/grad_norm"])
    assert all(math.isfinite(n) for n in norms) and max(norms) > 0
    w0, w2 = weights(run.policy(0)), weights(run.policy(2))
    assert any(not torch.equal(w0[n], w2[n]) for n in w0)


def test_grpo_has_only_on_policy_samples(runs):
    rows = read_table(runs["grpo"].rollouts(1)).to_pylist()
    assert {r["kind"] for r in rows} == {"on_policy"}
    assert all(r["prefix_len"] == 0 for r in rows)


def test_seeded_samples_start_with_a_historical_prefix(runs):
    run = runs["thinking_seeds"]
    k = 1  # θ_0 is in the pool (snapshot at iteration 0) and θ_1 is the current policy
    prefixes = read_table(run.prefixes(k)).to_pylist()
    rollouts = [r for r in read_table(run.rollouts(k)).to_pylist() if r["kind"] == "seeded"]
    assert len(rollouts) == len(prefixes) == 6 * 3
    by_prompt = {}
    for p in prefixes:
        by_prompt.setdefault(p["prompt_id"], []).append(p)
    model0, tok = load_model(run.pool_root / "step_000000")
    max_new = load_config("tiny", SMALL).rollout.max_new_tokens
    for r in rollouts:
        p = by_prompt[r["prompt_id"]].pop(0)
        n = r["prefix_len"]
        assert p["source_step"] == r["source_step"] < k  # historical, never the current policy
        assert r["token_ids"][:n] == p["prefix_token_ids"]
        assert r["behaviour_logprobs"][:n] == p["behaviour_logprobs"]
        assert len(p["behaviour_logprobs"]) == n
        assert 0.2 <= p["prefix_ratio"] <= 0.6
        # prefix.ratio_of=budget (the default): a draft that ended within its budget B = ⌊λ·T⌋ is cut at
        # L = ⌊λ·|z|⌋ (λ is stored as float32, hence the tolerance), any other at B (it was stopped there)
        budget = int(p["prefix_ratio"] * max_new + 1e-4)
        assert p["draft_len"] <= max_new
        assert n == min(budget, p["draft_len"]) or 0 <= p["prefix_ratio"] * p["draft_len"] - n < 1 + 1e-4
        if n:
            # The recorded behaviour log-probs are the source checkpoint's own.
            with torch.no_grad():
                sc = score_responses(model0, [r["prompt_token_ids"]], [p["prefix_token_ids"]], pad_id=tok.pad_token_id)
            assert torch.allclose(sc.logprobs[0, :n], torch.tensor(p["behaviour_logprobs"]), atol=1e-4)
    assert any(r["prefix_len"] > 0 for r in rollouts)


def test_update_reports_prefix_population(runs):
    m = runs["thinking_seeds"].read_manifest(1, "update").metrics
    for pop in ("on_policy", "continuation", "prefix"):
        assert f"actor/pg_clipfrac/{pop}" in m
        assert f"actor/entropy/{pop}" in m
    # Prefix tokens are scored against π_h = θ_0 while the policy is θ_1: the ratio moved off 1.
    assert m["actor/ratio_max/prefix"] != pytest.approx(1.0, abs=1e-6)


def test_rerun_skips_completed_stages(runs):
    run = runs["grpo"]
    before = run.manifest_path(1, "update").stat().st_mtime_ns
    train(run, load_config("tiny", ["algorithm=grpo"] + SMALL))
    assert run.manifest_path(1, "update").stat().st_mtime_ns == before
