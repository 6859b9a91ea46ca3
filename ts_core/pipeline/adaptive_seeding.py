"""prefix.when=on_failure: the seeds and continuation stages of adaptive, success-conditioned seeding
(the rule in algo/adaptive_seeding.py). `seeds_stage` / `continuation_stage` are what STAGE_FUNCS runs:
the plain bodies (stage_seeds.seeds, stage_continuation.continuation) unless prefix.when=on_failure.

Who does what, and why:

    seeds k         θ_k samples the *probe*: group_size - seeds_per_group on-policy responses per
                    prompt (stage_continuation.sample_groups, the continuation stage's own seed, so
                    they are the very samples an always-seeded run draws in those slots), scored
                    with the Session's verifier; the pool drafts seeds for the failing prompts only
                    (stage_seeds.prefixes_for, tag '/on_failure'; prefix.failure_drafts per seed
                    slot). Writes the drafts to the prefix
                    corpus (prefixes.parquet, wrong drafts included, so `ts sql` sees what was
                    drafted and its draft_reward) and the probe, pending, to
                    rollouts/iteration=k/probe.parquet.
    continuation k  the remaining seeds_per_group slots: each failing prompt's correct drafts,
                    the first ones in draw order (algo continued_drafts; a slot with no correct
                    draft is on-policy: prefix.filter=correct_draft), and
                    seeds_per_group more on-policy samples for every other prompt, in one engine
                    call with its own seed; generated.parquet holds whole groups (probe first), as
                    always, and verify scores them all again (the verifier is deterministic).

The seeds stage samples the probe, rather than the continuation stage drafting seeds itself,
because the prefix corpus is the seeds stage's output: the corpus, its manifest and `ts sql` stay
as they are, and the stage graph (graph.upstream_of) is unchanged. Every draw has its own seed per
(iteration, stage, tag), so a rerun after a crash computes the same probe, drafts and samples:
resume stays bit-identical. The price: seeds k reads θ_k, so it cannot be drafted ahead beside
update k-1 (pipeline.overlap drafts nothing for on_failure: stage_seeds.draft_ahead) -- the same run,
overlap on or off.
"""

from __future__ import annotations

from thinking_seeds.algo.adaptive_seeding import (
    continued_drafts,
    failed_prompts,
    second_on_policy_slots,
    seeding_metrics,
)
from thinking_seeds.pipeline.graph import stage_seed
from thinking_seeds.pipeline.rows import PrefixRow, RolloutRow, read_rows, write_rows
from thinking_seeds.pipeline.session import Session, Timer, mean
from thinking_seeds.pipeline.stage_continuation import continuation, generated_manifest, sample_groups
from thinking_seeds.pipeline.stage_seeds import drafts_per_prompt, prefixes_for, seeds
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.prefix_aggregates import write_prefix_aggregates
from thinking_seeds.store.run_dir import RunDir

TAG = "/on_failure"


def on_failure(s: Session) -> bool:
    return s.cfg.seeded and s.cfg.prefix.when == "on_failure"


def seeds_stage(s: Session, k: int) -> Manifest:
    return seeds_on_failure(s, k) if on_failure(s) else seeds(s, k)


def continuation_stage(s: Session, k: int) -> Manifest:
    return continue_on_failure(s, k) if on_failure(s) else continuation(s, k)


def probe_path(run: RunDir, k: int):
    return run.generated(k).with_name("probe.parquet")


def seeds_on_failure(s: Session, k: int) -> Manifest:
    """seeds k with prefix.when=on_failure: the probe, then drafts for the prompts it failed (module doc)."""
    cfg, run = s.cfg, s.run
    m = Manifest("seeds", k, cfg.config_hash())
    t = Timer()
    prompts = s.iteration_prompts(k)
    probe, probe_tokens = sample_groups(s, k, prompts, [], stage_seed(cfg, k, "continuation"), t)
    by_id = {p.prompt_id: p for p in prompts}
    with t("verification"):
        verdicts = s.verifier.score_batch([r.response_text for r in probe], [by_id[r.prompt_id] for r in probe])
    failed = failed_prompts([r.prompt_id for r in probe], [v.reward for v in verdicts])
    failing = set(failed)
    n_drafts = drafts_per_prompt(s) * cfg.prefix.failure_drafts
    rows = prefixes_for(s, k, [p for p in prompts if p.prompt_id in failing], TAG, t, n_drafts)
    with t("io"):
        path = write_rows(PrefixRow, rows, run.prefixes(k))
        m.record(run, "prefix_aggregates", write_prefix_aggregates(path))
        m.record(run, "prefixes", path, rows=len(rows))
        m.record(run, "probe", write_rows(RolloutRow, probe, probe_path(run, k)), rows=len(probe))
    drafts = [(r.prompt_id, r.draft_reward, r.draft_len) for r in rows]
    m.metrics = {
        "seeds/mean_prefix_len": mean(len(r.prefix_token_ids) for r in rows),
        **seeding_metrics(len(prompts), failed, drafts, probe_tokens),
    }
    scored = [r.draft_reward for r in rows if r.draft_reward is not None]
    if scored:  # drafts cut at a share of the budget are not scored: no metric (stage_seeds.py)
        m.metrics["seeds/draft_reward"] = mean(scored)
    m.seconds = t.seconds
    return m


def continue_on_failure(s: Session, k: int) -> Manifest:
    """continuation k with prefix.when=on_failure: each group's last seeds_per_group samples (module doc)."""
    cfg, run = s.cfg, s.run
    m = Manifest("continuation", k, cfg.config_hash())
    t = Timer()
    with t("io"):
        drafts = read_rows(PrefixRow, run.prefixes(k))
        probe = read_rows(RolloutRow, probe_path(run, k))
    keep = continued_drafts([r.prompt_id for r in drafts], [r.draft_reward for r in drafts], drafts_per_prompt(s))
    pre = [drafts[i] for i in keep]  # prefix.failure_drafts > 1: the first correct ones fill the slots
    prompts = s.iteration_prompts(k)
    S = cfg.rollout.seeds_per_group
    n_on = second_on_policy_slots([p.prompt_id for p in prompts], {r.prompt_id for r in pre}, S)
    first = cfg.rollout.group_size - S
    rest, generated = sample_groups(s, k, prompts, pre, stage_seed(cfg, k, "continuation" + TAG), t, n_on, first)
    by_prompt: dict[str, list[RolloutRow]] = {p.prompt_id: [] for p in prompts}
    for r in probe + rest:
        by_prompt[r.prompt_id].append(r)
    rows = [r for p in prompts for r in by_prompt[p.prompt_id]]
    generated += sum(len(r.token_ids) for r in probe)  # the probe's tokens are θ_k's rollouts too
    seeded_frac = mean(float(r.kind != "on_policy") for r in rows)
    return generated_manifest(s, m, k, rows, generated, t, **{"seeding/seeded_samples_frac": seeded_frac})
