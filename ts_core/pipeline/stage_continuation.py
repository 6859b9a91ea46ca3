"""continuation k: θ_k samples the on-policy responses and continues every seed to the end
(docs/algorithm.md §2.3), into rollouts/iteration=k/generated.parquet (rows pending verification)."""

from __future__ import annotations

from collections import defaultdict

from thinking_seeds.config import RunConfig
from thinking_seeds.engine.models import encode_prompt
from thinking_seeds.engine.rollout import SamplingParams
from thinking_seeds.pipeline.graph import stage_seed
from thinking_seeds.pipeline.rows import PrefixRow, RolloutRow, read_rows, write_rows
from thinking_seeds.pipeline.session import Session, Timer, mean
from thinking_seeds.store.manifest import Manifest


def continuation(s: Session, k: int) -> Manifest:
    """Lay out each prompt's group (n_on on-policy slots, then each seed `continuations_per_seed`
    times in a row: verify's same_seed baseline relies on this order) and generate the rest."""
    cfg, run = s.cfg, s.run
    m = Manifest("continuation", k, cfg.config_hash())
    t = Timer()
    prompts = s.iteration_prompts(k)
    tok = s.tokenizer
    with t("io"):
        pre = read_rows(PrefixRow, run.prefixes(k)) if cfg.seeded else []
    seeds_of: dict[str, list[PrefixRow]] = defaultdict(list)
    for r in pre:
        seeds_of[r.prompt_id].append(r)
    n_on = cfg.rollout.group_size - cfg.rollout.seeds_per_group
    T = cfg.rollout.max_new_tokens
    rows: list[RolloutRow] = []
    ctx, caps, gen_rows = [], [], []  # what the engine continues: contexts, token budgets, row indices
    for p in prompts:
        pids = encode_prompt(tok, p.chat())
        # prefix.filter: a wrong draft's slot goes to an on-policy sample (None)
        group = [None] * n_on + [
            r if _keep_seed(cfg, r) else None
            for r in seeds_of[p.prompt_id]
            for _ in range(cfg.rollout.continuations_per_seed)
        ]
        for j, seed in enumerate(group):
            on_policy = seed is None
            prefix = [] if on_policy else seed.prefix_token_ids
            full = not on_policy and seed.prefix_ratio >= 1.0
            rows.append(
                RolloutRow(
                    run_id=run.run_id,
                    iteration=k,
                    prompt_id=p.prompt_id,
                    sample_id=j,
                    kind="on_policy" if on_policy else ("offpolicy_full" if full else "seeded"),
                    source_step=None if on_policy else seed.source_step,
                    prefix_len=len(prefix),
                    prompt_token_ids=pids,
                    token_ids=list(prefix),
                    old_logprobs=[0.0] * len(prefix),
                    behaviour_logprobs=[] if on_policy else list(seed.behaviour_logprobs),
                    response_text="",
                    answer=None,
                    status="pending",
                    reward=None,
                    advantage=None,
                )
            )
            if not full:
                ctx.append(pids + list(prefix))
                caps.append(max(0, T - len(prefix)))
                gen_rows.append(len(rows) - 1)
    params = SamplingParams(
        cfg.rollout.temperature, cfg.rollout.top_p, T, seed=stage_seed(cfg, k, "continuation"), feed_context=True
    )
    # Sharded by rollout.batch_size: this process's engine, or the Ray rollout workers (Session.generate).
    gens = s.generate(s.policy(k), ctx, params, max_new=caps, timer=t)
    for i, g in zip(gen_rows, gens, strict=True):
        r = rows[i]
        r.token_ids = r.token_ids + g.token_ids
        r.old_logprobs = r.old_logprobs + g.logprobs
        r.behaviour_logprobs = r.behaviour_logprobs + [0.0] * len(g.token_ids)
    for r in rows:
        r.response_text = tok.decode(r.token_ids, skip_special_tokens=True)
    with t("io"):
        path = write_rows(RolloutRow, rows, run.generated(k))
    m.record(run, "generated", path, rows=len(rows))
    m.metrics = {
        "rollout/generated_tokens": float(sum(len(g.token_ids) for g in gens)),
        "rollout/response_len": mean(len(r.token_ids) for r in rows),
    }
    m.seconds = t.seconds
    return m


def _keep_seed(cfg: RunConfig, seed: PrefixRow) -> bool:
    """prefix.filter=correct_draft keeps only seeds whose whole draft was verified correct (data-set
    solutions have no draft reward and are kept)."""
    if cfg.prefix.filter == "none" or seed.draft_reward is None:
        return True
    return seed.draft_reward >= 1.0
