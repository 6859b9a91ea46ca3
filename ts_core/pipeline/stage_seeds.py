"""seeds k: offline prefix generation (docs/algorithm.md §2.2). Historical checkpoints write drafts, each cut at
λ·|z|, into corpus/prefixes/iteration=k/prefixes.parquet; on-policy methods write nothing.

Every pool member's drafts over every prompt are one call of `Session.generate_many`, cut into shards of
rollout.batch_size; shard i of every member is one engine call where the engine samples several checkpoints
at once (the HF engine stacks their weights, engine/stacked.py; vLLM with LoRA adapters per request,
rollout.lora_requests), else one weight swap and call per member. With prefix.ratio_of=budget a draft is
generated only up to its cut (algo/seeding.py). With pipeline.overlap the drafts may have been
sampled ahead, while update k-1 ran (`draft_ahead`, pipeline/seeds_ahead.py); the stage then only
writes them."""

from __future__ import annotations

import logging
import random
from collections import defaultdict

from thinking_seeds.data.sources import Prompt
from thinking_seeds.engine.rollout import Generation
from thinking_seeds.pipeline import seed_files
from thinking_seeds.pipeline.graph import stage_seed
from thinking_seeds.pipeline.rows import PrefixRow
from thinking_seeds.pipeline.seed_plan import DraftCall, SeedDraw, draft_calls, draw_seeds, seed_tokens
from thinking_seeds.pipeline.seeds_ahead import Ahead, fingerprint, has_ahead, put_ahead, take_ahead
from thinking_seeds.pipeline.session import Session, Timer, mean
from thinking_seeds.store.checkpoints import CheckpointInfo
from thinking_seeds.store.historical_pool import HistoricalPool
from thinking_seeds.store.manifest import Manifest

log = logging.getLogger(__name__)


def seeds(s: Session, k: int) -> Manifest:
    """Write iteration k's seeds: `seeds_per_group / continuations_per_seed` drafts per prompt."""
    cfg, run = s.cfg, s.run
    m = Manifest("seeds", k, cfg.config_hash())
    t = Timer()
    if not cfg.seeded:
        m.seconds = t.seconds
        return m  # on-policy methods have no seeds
    ahead = None
    if cfg.prefix.source == "dataset":
        rows = _dataset_seeds(s, k, s.iteration_prompts(k), drafts_per_prompt(s))
    else:
        pool, members = s.pool_members(k)
        ahead = take_ahead(s, k, members)
        if ahead is not None:  # sampled while update k-1 ran: the same rows (pipeline/seeds_ahead.py)
            rows = ahead.rows
            t.seconds.update(ahead.seconds)
        else:
            rows = historical_rows(s, k, pool, members, t)
    with t("io"):  # the two files; computed beside the update when the drafts were (pipeline/seed_files.py)
        path, aggregates = seed_files.write(rows, run.prefixes(k), ahead.files if ahead is not None else None)
        m.record(run, "prefix_aggregates", aggregates)  # for `ts sql` on a live run
    m.record(run, "prefixes", path, rows=len(rows))
    lens = [len(r.prefix_token_ids) for r in rows]
    m.metrics = {
        "seeds/mean_prefix_len": sum(lens) / max(1, len(lens)),
    }
    scored = [r.draft_reward for r in rows if r.draft_reward is not None]
    if scored:  # drafts cut at a share of the budget are not generated to their end, nor scored: no metric
        m.metrics["seeds/draft_reward"] = mean(scored)
    if ahead is not None and ahead.banked:  # drafted with an earlier iteration's (pipeline.seeds_block)
        m.metrics["perf/seeds_banked"] = 1.0
    elif ahead is not None:  # its seconds (same names: the same work) were spent beside update k-1
        m.metrics["perf/seeds_ahead"] = 1.0
    m.seconds = t.seconds
    return m


def draft_ahead(s: Session, k: int) -> bool:
    """Sample seeds k now, while update k-1 may still run, and keep them for the seeds stage in this
    process (pipeline/seeds_ahead.py); whether it did.

    Skipped when seeds k is on disk already (a resumed run) or no pool member is older than θ_k (θ_k
    writes its own seeds and does not exist yet). A failure logs one line: the stage samples them.
    """
    cfg = s.cfg
    if not cfg.seeded or cfg.prefix.source != "historical" or s.run.manifest_path(k, "seeds").exists():
        return False
    if cfg.prefix.when == "on_failure":  # θ_k's own probe picks the prompts: nothing to draft before it exists
        return False
    if has_ahead(s, k):  # drafted already, with an earlier iteration's block (pipeline.seeds_block)
        return True
    try:
        pool, members = s.pool_members(k)
        if not members:
            return False
        t = Timer()
        rows = historical_rows(s, k, pool, members, t)  # with pipeline.seeds_block: the block's too
        with t("io_ahead"):  # the stage then only writes them
            files = seed_files.prepare(rows, s.run.run_id)
        put_ahead(s, k, Ahead(rows, fingerprint(members), t.seconds, files=files))
        return True
    except Exception as e:  # the stage samples them again and reports its own error
        log.warning("seeds %d: sampling ahead failed (%s: %s); the seeds stage samples them", k, type(e).__name__, e)
        return False


def drafts_per_prompt(s: Session) -> int:
    """One draft per seed slot of a group: each draft is continued `continuations_per_seed` times."""
    return s.cfg.rollout.seeds_per_group // s.cfg.rollout.continuations_per_seed


def _dataset_seeds(s: Session, k: int, prompts: list[Prompt], n_drafts: int) -> list[PrefixRow]:
    """LUFFY guidance: the data set's worked solution is the whole off-policy response. Its behaviour
    log-prob is 0 (a deterministic guide), as LUFFY assumes π_φ = 1."""
    tok = s.tokenizer
    rows = []
    for p in prompts:
        if not p.target:
            raise ValueError(
                f"prompt {p.prompt_id} has no `target` solution; prefix.source=dataset needs one per prompt"
            )
        ids = tok(p.target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        for j in range(n_drafts):
            rows.append(
                _prefix_row(
                    s, k, p, j, source_step=-1, ratio=1.0, ids=ids, logps=[0.0] * len(ids), draft_len=len(ids),
                    draft_reward=None,
                )
            )  # fmt: skip
    return rows


def prefixes_for(
    s: Session, k: int, prompts: list[Prompt], tag: str, t: Timer, n_drafts: int | None = None
) -> list[PrefixRow]:
    """Seeds for further prompts of iteration k, drafted on demand by the same pool as the seeds stage's
    (dynamic sampling's later rounds, pipeline/oversample.py; adaptive seeding's failing prompts): `tag`
    (e.g. '/round1') gives the draws and samples their own seeds; `n_drafts` per prompt (default: one per
    seed slot). Dynamic sampling's are not written to the corpus: the rollouts that continue them keep
    their tokens."""
    if not s.cfg.seeded or not prompts:
        return []
    n_drafts = n_drafts or drafts_per_prompt(s)
    if s.cfg.prefix.source == "dataset":
        return _dataset_seeds(s, k, prompts, n_drafts)
    pool, members = s.pool_members(k)
    return block_rows(s, [k], pool, members, t, prompts=prompts, tag=tag, n_drafts=n_drafts)[k]


def seed_block(s: Session, k: int) -> list[int]:
    """The iterations whose seeds are drafted together with k's (pipeline.seeds_block): k and the next
    ones while the pool stays what it is at k (no snapshot joins it: snapshot j is historical from j+1
    on) and their seeds are still to write. θ_0 writing its own seeds (an empty pool) drafts alone."""
    cfg, ks = s.cfg, [k]
    if not s.pool_members(k)[1]:
        return ks
    while len(ks) < cfg.pipeline.seeds_block and ks[-1] % cfg.pool.snapshot_every != 0:
        j = ks[-1] + 1
        if j >= cfg.iterations or s.run.manifest_path(j, "seeds").exists() or has_ahead(s, j):
            break
        ks.append(j)
    return ks


def historical_rows(
    s: Session,
    k: int,
    pool: HistoricalPool,
    members: list[CheckpointInfo],
    t: Timer,
) -> list[PrefixRow]:
    """Pool `members` write drafts (every member's in one engine call per shard group, or one call per
    member: module doc), scored, then cut at λ; with prefix.ratio_of=budget each draft stops at
    its cut and is not scored. With pipeline.seeds_block the seeds stage's own call drafts the seeds of
    the next iterations of the block too and keeps them for their seeds stages (`put_ahead`).
    (prefixes_for drafts for one iteration's further prompts alone: block_rows with its own tag.)"""
    ks = seed_block(s, k)
    rows = block_rows(s, ks, pool, members, t)
    for j in ks[1:]:
        put_ahead(s, j, Ahead(rows[j], fingerprint(members), {}, banked=True))
    return rows[k]


def block_rows(
    s: Session,
    ks: list[int],
    pool: HistoricalPool,
    members: list[CheckpointInfo],
    t: Timer,
    prompts: list[Prompt] | None = None,
    tag: str = "",
    n_drafts: int | None = None,
) -> dict[int, list[PrefixRow]]:
    """The seed rows of iterations `ks` (one pool): every (member, iteration) call as each iteration
    alone makes it (its own contexts, shards and seeds: the same samples), ordered by member so the
    engine loads each member's weights once for the whole block. `prompts`, `tag` and `n_drafts`
    (default: the iteration's prompts, '', one draft per seed slot) serve prefixes_for."""
    plans = {j: _plan(s, j, pool, members, prompts, tag, n_drafts) for j in ks}
    calls = [(c.source_step, j, c) for j in ks for c in plans[j][1]]
    calls.sort(key=lambda c: (c[0], c[1]))  # member first: consecutive calls share its weights
    sources = {c.step: c.path for c in members}
    # Sharded by rollout.batch_size (Session.generate_many): shard i of every member in one engine call (the
    # HF engine's stacked weights, vLLM's LoRA adapters per request), else a weight swap and call per member;
    # on this process's engine or the Ray rollout workers.
    engine_calls = [
        (sources.get(step) or s.policy(j), c.contexts, c.params, c.caps) for step, j, c in calls
    ]  # no member: θ_j writes its own seeds
    # grouped by iteration: a block's drafts are sampled in the groups each iteration alone makes (the same numbers)
    gens = s.generate_many(engine_calls, timer=t, keys=[j for _, j, _ in calls])
    drafts: dict[int, dict[int, Generation]] = defaultdict(dict)
    for (_, j, c), g in zip(calls, gens, strict=True):
        drafts[j].update(zip(c.draws, g, strict=True))
    return {j: _rows(s, j, plans[j][0], drafts[j], t) for j in ks}


def _plan(
    s: Session,
    k: int,
    pool: HistoricalPool,
    members: list[CheckpointInfo],
    prompts: list[Prompt] | None = None,
    tag: str = "",
    n_drafts: int | None = None,
) -> tuple[list[SeedDraw], list[DraftCall]]:
    """Iteration k's draws in their seeded order (pipeline/seed_plan.py) and its engine calls by source.
    Before the first snapshot is historical (iteration 0), θ_0 itself writes the seeds: its ratio
    π_θ/π_h is exactly 1 there, so the group keeps its shape for every method."""
    cfg = s.cfg
    prompts = s.iteration_prompts(k) if prompts is None else prompts
    rng = random.Random(stage_seed(cfg, k, "seeds" + tag))
    pre = cfg.prefix
    plan = draw_seeds(prompts, n_drafts or drafts_per_prompt(s), pool, members, rng, (pre.ratio_min, pre.ratio_max), k)
    calls = draft_calls(
        cfg,
        s.tokenizer,
        plan,
        lambda step: stage_seed(cfg, k, f"seeds/{step}{tag}"),
        cfg.rollout.temperature,
        cfg.rollout.top_p,
    )
    return plan, calls


def _rows(s: Session, k: int, plan: list[SeedDraw], drafts: dict[int, Generation], t: Timer) -> list[PrefixRow]:
    cfg, tok = s.cfg, s.tokenizer
    rewards: list[float | None] = [None] * len(plan)  # ratio_of=budget: no draft has its end
    if cfg.prefix.ratio_of != "budget":
        texts = [tok.decode(drafts[i].token_ids, skip_special_tokens=True) for i in range(len(plan))]
        with t("verification"):
            rewards = [v.reward for v in s.verifier.score_batch(texts, [d.prompt for d in plan])]
    rows = []
    for i, d in enumerate(plan):
        g = drafts[i]
        L = seed_tokens(cfg, tok, g, d.ratio)
        lam = d.ratio
        if cfg.prefix.cut == "steps":  # λ was drawn (the draws' order is part of the seed) but not used
            lam = L / len(g.token_ids) if g.token_ids else 0.0
        rows.append(
            _prefix_row(
                s, k, d.prompt, d.index, source_step=d.source_step, ratio=lam, ids=g.token_ids[:L],
                logps=g.logprobs[:L], draft_len=len(g.token_ids), draft_reward=rewards[i],
            )
        )  # fmt: skip
    return rows


def _prefix_row(
    s: Session,
    k: int,
    p: Prompt,
    j: int,
    *,
    source_step: int,
    ratio: float,
    ids: list[int],
    logps: list[float],
    draft_len: int,
    draft_reward: float | None,
) -> PrefixRow:
    """Seed j of prompt p at iteration k; source_step -1 (age -1): the data set's solution (luffy)."""
    return PrefixRow(
        run_id=s.run.run_id,
        iteration=k,
        prompt_id=p.prompt_id,
        seed_id=f"{k}-{p.prompt_id}-{j}",
        source_step=source_step,
        source_age=k - source_step if source_step >= 0 else -1,
        prefix_ratio=ratio,
        prefix_token_ids=list(ids),
        behaviour_logprobs=list(logps),
        prefix_text=s.tokenizer.decode(list(ids), skip_special_tokens=True),
        draft_len=draft_len,
        draft_reward=draft_reward,
    )
