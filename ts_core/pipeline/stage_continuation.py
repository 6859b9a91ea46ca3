"""continuation k: θ_k samples the on-policy responses and continues every seed to the end
(docs/algorithm.md §2.3), into rollouts/iteration=k/generated.parquet (rows pending verification).
With pipeline.max_staleness = s it is θ_{k-s}, and the groups may have been sampled while update k-1
ran (`sample_ahead`, held by pipeline/groups_ahead.py); the stage then only writes them.

`sample_groups` is the body: dynamic sampling's later rounds (pipeline/oversample.py) call it for
further prompts with their own seed, so every round lays out and samples its groups the same way."""

from __future__ import annotations

import logging
from collections import defaultdict

from thinking_seeds.algo.overlong import is_truncated
from thinking_seeds.config import RunConfig
from thinking_seeds.data.sources import Prompt
from thinking_seeds.engine.models import encode_prompt
from thinking_seeds.engine.rollout import SamplingParams
from thinking_seeds.pipeline.graph import rollout_step, stage_seed
from thinking_seeds.pipeline.groups_ahead import GroupsAhead, put_groups, take_groups
from thinking_seeds.pipeline.policy_chain import policy_at_hand, policy_id
from thinking_seeds.pipeline.rows import PrefixRow, RolloutRow, as_stored, read_rows, write_rows
from thinking_seeds.pipeline.seeds_ahead import peek_ahead
from thinking_seeds.pipeline.session import Session, Timer, mean
from thinking_seeds.pipeline.stage_seeds import draft_ahead
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.transports import live_weights

log = logging.getLogger(__name__)


def continuation(s: Session, k: int) -> Manifest:
    """Generate iteration k's groups (`sample_groups`) and write them, pending verification."""
    cfg, run = s.cfg, s.run
    m = Manifest("continuation", k, cfg.config_hash())
    t = Timer()
    with t("io"):
        pre = read_rows(PrefixRow, run.prefixes(k)) if cfg.seeded else []
    ahead = take_groups(s, k, pre) if cfg.pipeline.max_staleness > 0 else None
    if ahead is not None:  # sampled while update k-1 ran, by the same θ_{k-s}: the same rows (groups_ahead.py)
        rows, generated = ahead.rows, ahead.generated
        t.seconds.update(ahead.seconds)  # the same names for the same work, spent beside update k-1
    else:
        rows, generated = sample_groups(s, k, s.iteration_prompts(k), pre, stage_seed(cfg, k, "continuation"), t)
    extra = {"rollout/staleness": float(k - rollout_step(cfg, k))} if cfg.pipeline.max_staleness > 0 else {}
    if ahead is not None:
        extra["perf/sampled_ahead"] = 1.0
    return generated_manifest(s, m, k, rows, generated, t, **extra)


def generated_manifest(
    s: Session, m: Manifest, k: int, rows: list[RolloutRow], generated: int, t: Timer, **metrics: float
) -> Manifest:
    """Write iteration k's generated rows (pending verification) and fill the continuation manifest:
    the file, the token counts and `metrics` (the adaptive-seeding body adds its own)."""
    with t("io"):
        path = write_rows(RolloutRow, rows, s.run.generated(k))
    m.record(s.run, "generated", path, rows=len(rows))
    m.metrics = {
        "rollout/generated_tokens": float(generated),
        "rollout/response_len": mean(len(r.token_ids) for r in rows),
        "rollout/truncated_frac": mean(float(bool(r.truncated)) for r in rows),
        **metrics,
    }
    m.seconds = t.seconds
    return m


def sample_groups(
    s: Session,
    k: int,
    prompts: list[Prompt],
    prefixes: list[PrefixRow],
    seed: int,
    t: Timer,
    n_on: dict[str, int] | None = None,
    first_id: int = 0,
) -> tuple[list[RolloutRow], int]:
    """Lay out each prompt's group (n_on on-policy slots, then each seed `continuations_per_seed`
    times in a row: verify's same_seed baseline relies on this order), generate the rest in one
    engine call seeded by `seed`; the rows (pending) and the tokens generated.

    `n_on` (prompt id -> on-policy slots; default group_size - seeds_per_group each) and `first_id` (the
    first sample_id) lay out part of a group: prefix.when=on_failure samples a group in two calls
    (pipeline/adaptive_seeding.py)."""
    cfg, run, tok = s.cfg, s.run, s.tokenizer
    seeds_of: dict[str, list[PrefixRow]] = defaultdict(list)
    for r in prefixes:
        seeds_of[r.prompt_id].append(r)
    n_default = cfg.rollout.group_size - cfg.rollout.seeds_per_group
    T = cfg.rollout.max_new_tokens
    rows: list[RolloutRow] = []
    ctx, caps, gen_rows = [], [], []  # what the engine continues: contexts, token budgets, row indices
    for p in prompts:
        pids = encode_prompt(tok, p.chat())
        # prefix.filter: a wrong draft's slot goes to an on-policy sample (None)
        group = [None] * (n_default if n_on is None else n_on[p.prompt_id]) + [
            r if _keep_seed(cfg, r) else None
            for r in seeds_of[p.prompt_id]
            for _ in range(cfg.rollout.continuations_per_seed)
        ]
        for j, seed_row in enumerate(group, start=first_id):
            on_policy = seed_row is None
            prefix = [] if on_policy else seed_row.prefix_token_ids
            full = not on_policy and seed_row.prefix_ratio >= 1.0
            rows.append(
                RolloutRow(
                    run_id=run.run_id,
                    iteration=k,
                    prompt_id=p.prompt_id,
                    sample_id=j,
                    kind="on_policy" if on_policy else ("offpolicy_full" if full else "seeded"),
                    source_step=None if on_policy else seed_row.source_step,
                    prefix_len=len(prefix),
                    prompt_token_ids=pids,
                    token_ids=list(prefix),
                    old_logprobs=[0.0] * len(prefix),
                    behaviour_logprobs=[] if on_policy else list(seed_row.behaviour_logprobs),
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
    params = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_p, T, seed=seed, feed_context=True)
    # Sharded by rollout.batch_size: this process's engine, or the Ray rollout workers (Session.generate).
    version = rollout_step(cfg, k)  # θ_k, or θ_{k-s} with pipeline.max_staleness
    gens = s.generate(s.policy(version), ctx, params, max_new=caps, timer=t)
    finished: dict[int, bool] = {}
    for i, g in zip(gen_rows, gens, strict=True):
        r = rows[i]
        r.token_ids = r.token_ids + g.token_ids
        r.old_logprobs = r.old_logprobs + g.logprobs
        r.behaviour_logprobs = r.behaviour_logprobs + [0.0] * len(g.token_ids)
        r.policy_version = version
        finished[i] = g.finished
    for i, r in enumerate(rows):
        r.response_text = tok.decode(r.token_ids, skip_special_tokens=True)
        last = r.token_ids[-1] if r.token_ids else None
        r.truncated = is_truncated(len(r.token_ids), finished.get(i), last, tok.eos_token_id, T)
    return rows, sum(len(g.token_ids) for g in gens)


def _keep_seed(cfg: RunConfig, seed: PrefixRow) -> bool:
    """prefix.filter=correct_draft keeps only seeds whose whole draft was verified correct (data-set
    solutions have no draft reward and are kept). prefix.cut=steps drops a draft with too few steps
    (an empty seed): its slot is on-policy, and its row says so (kind on_policy, no source)."""
    if cfg.prefix.cut == "steps" and not seed.prefix_token_ids:
        return False
    if cfg.prefix.filter == "none" or seed.draft_reward is None:
        return True
    return seed.draft_reward >= 1.0


def prepare_ahead(s: Session, k: int) -> bool:
    """In the main thread, before update k-1 starts: whether groups k can be sampled beside it. In
    process, θ_{k-s}'s borrowed tensors are replaced by a copy the update leaves alone."""
    cfg, run = s.cfg, s.run
    if run.manifest_path(k, "continuation").exists():
        return False  # a resumed run: done already
    step = rollout_step(cfg, k)
    live_weights.keep_copy(run.policy(step))
    return policy_at_hand(run, cfg, step)


def sample_ahead(s: Session, k: int) -> bool:
    """The thread's body: draft seeds k (if the method seeds) and sample groups k; whether it did. A
    failure logs one line: the stage samples them in its turn and reports its own error."""
    cfg = s.cfg
    try:
        prefixes: list[PrefixRow] = []
        if cfg.seeded:
            if not draft_ahead(s, k):
                return False
            held = peek_ahead(s, k)
            if held is None:
                return False
            prefixes = as_stored(PrefixRow, held.rows)  # as the stage will read them back
        step = rollout_step(cfg, k)
        t = Timer()
        seed = stage_seed(cfg, k, "continuation")
        rows, generated = sample_groups(s, k, s.iteration_prompts(k), prefixes, seed, t)
        ahead = GroupsAhead(rows, generated, policy_id(s.run, step), prefixes, t.seconds)
        put_groups(s, k, ahead)
        return True
    except Exception as e:
        log.warning("continuation %d: sampling ahead failed (%s: %s); the stage samples it", k, type(e).__name__, e)
        return False
