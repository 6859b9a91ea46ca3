"""One iteration of the 24 game with one-step seeds (prefix.cut=steps): every stored seed is exactly
one complete step line of its draft or empty, and every empty seed's slot is an on-policy sample."""

import pyarrow.parquet as pq

from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.run_dir import RunDir

SMALL = [
    "iterations=1",
    "rollout.prompts_per_iteration=8",
    "rollout.group_size=4",
    "rollout.seeds_per_group=2",
    "eval.every=1000",
    "eval.prompts=4",
    "eval.samples=1",
    "eval.seeded=false",
    "update.launcher=in_process",
    "update.mini_batches=1",
]


def test_one_step_seeds_are_one_line_or_on_policy(tmp_path):
    cfg = load_config("game24", [*SMALL, "prefix.cut=steps", "prefix.steps=1"])
    run = train(RunDir.for_run("steps", tmp_path), cfg)
    seeds = pq.read_table(run.prefixes(0)).to_pylist()
    assert len(seeds) == 8 * 2
    empty = [s for s in seeds if not s["prefix_token_ids"]]
    kept = [s for s in seeds if s["prefix_token_ids"]]
    assert kept, "θ_0 writes a complete first step in most drafts"
    for s in kept:
        text = s["prefix_text"]
        assert text.endswith("\n") and text.count("\n") == 1 and "boxed" not in text, text
        assert abs(s["prefix_ratio"] - len(s["prefix_token_ids"]) / s["draft_len"]) < 1e-6  # float32 column
    rollouts = pq.read_table(run.rollouts(0)).to_pylist()
    seeded = [r for r in rollouts if r["kind"] == "seeded"]
    assert all(r["prefix_len"] > 0 for r in seeded)
    assert len(seeded) == len(kept)
    assert sum(r["kind"] == "on_policy" for r in rollouts) == 8 * 2 + len(empty)
