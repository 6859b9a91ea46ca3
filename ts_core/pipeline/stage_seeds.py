"""seeds k: offline prefix generation (docs/algorithm.md §2.2). Historical checkpoints write drafts, each cut at
λ·|z|, into corpus/prefixes/iteration=k/prefixes.parquet; on-policy methods write nothing.

All the drafts of one pool member are one engine call over every prompt (`Session.generate_many`,
cut into shards of rollout.batch_size); with vLLM serving LoRA adapters per request
(rollout.lora_requests) all members' drafts are ONE call. With prefix.ratio_of=budget a draft is
generated only up to its cut (algo/seeding.py). With pipeline.overlap the drafts may have been
sampled ahead, while update k-1 ran (`draft_ahead`, pipeline/seeds_ahead.py); the stage then only
writes them."""

from __future__ import annotations

import logging
import random
from collections import defaultdict

from thinking_seeds.algo.seeding import budget_tokens, draw_ratio, seed_length
from thinking_seeds.data.sources import Prompt
from thinking_seeds.engine.models import encode_prompt
from thinking_seeds.engine.rollout import SamplingParams
from thinking_seeds.pipeline.graph import stage_seed
from thinking_seeds.pipeline.rows import PrefixRow, write_rows
from thinking_seeds.pipeline.seeds_ahead import Ahead, fingerprint, has_ahead, put_ahead, take_ahead
from thinking_seeds.pipeline.session import Session, Timer, mean
from thinking_seeds.store.checkpoints import CheckpointInfo
from thinking_seeds.store.historical_pool import HistoricalPool
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.prefix_aggregates import write_prefix_aggregates

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
    with t("io"):
        path = write_rows(PrefixRow, rows, run.prefixes(k))
        m.record(run, "prefix_aggregates", write_prefix_aggregates(path))  # for `ts sql` on a live run
    m.record(run, "prefixes", path, rows=len(rows))
    lens = [len(r.prefix_token_ids) for r in rows]
    m.metrics = {
        "seeds/mean_prefix_len": sum(lens) / max(1, len(lens)),
        "seeds/draft_reward": mean(r.draft_reward for r in rows if r.draft_reward is not None),
    }
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
        put_ahead(s, k, Ahead(rows, fingerprint(members), t.seconds))
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
            rows.append(_prefix_row(s, k, p, j, -1, -1, 1.0, ids, [0.0] * len(ids), len(ids), None))
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
    """Pool `members` write drafts (one engine call per member over all prompts, or one for all of them
    with rollout.lora_requests), scored, then cut at λ; with prefix.ratio_of=budget each draft stops at
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
    calls = [(step, j, call) for j in ks for step, call in plans[j][1]]
    calls.sort(key=lambda c: (c[0], c[1]))  # member first: consecutive calls share its weights
    # Sharded by rollout.batch_size (Session.generate_many): one weight swap and call per member, on this
    # process's engine or the Ray rollout workers; or, vLLM serving LoRA adapters per request, ONE call.
    gens = s.generate_many([c for _, _, c in calls], timer=t)
    out: dict[tuple[int, int], list] = {(step, j): g for (step, j, _), g in zip(calls, gens, strict=True)}
    return {j: _rows(s, j, plans[j][0], plans[j][2], out, t) for j in ks}


def _plan(
    s: Session,
    k: int,
    pool: HistoricalPool,
    members: list[CheckpointInfo],
    prompts: list[Prompt] | None = None,
    tag: str = "",
    n_drafts: int | None = None,
):
    """Iteration k's draws (prompt, seed index, source step, λ) in their seeded order, its engine
    calls by source step, and the plan's row indices per source."""
    cfg, tok = s.cfg, s.tokenizer
    prompts = s.iteration_prompts(k) if prompts is None else prompts
    n_drafts = n_drafts or drafts_per_prompt(s)
    budget = cfg.prefix.ratio_of == "budget"
    T = cfg.rollout.max_new_tokens
    rng = random.Random(stage_seed(cfg, k, "seeds" + tag))
    # Before the first snapshot is historical (iteration 0), θ_0 itself writes the seeds:
    # its ratio π_θ/π_h is exactly 1 there, so the group keeps its shape for every method.
    sources = {c.step: c.path for c in members} or {k: s.policy(k)}
    plan = []  # (prompt, seed index, source step, λ); the draws' order is part of the seed
    for p in prompts:
        for j in range(n_drafts):
            step = pool.pick(members, rng).step if members else k
            plan.append((p, j, step, draw_ratio(rng, cfg.prefix.ratio_min, cfg.prefix.ratio_max)))
    by_source: dict[int, list[int]] = defaultdict(list)
    for i, (_, _, step, _) in enumerate(plan):
        by_source[step].append(i)
    calls = []  # one per pool member: (checkpoint, contexts, params with its own seed, max_new)
    for step, idx in sorted(by_source.items()):
        ctx = [encode_prompt(tok, plan[i][0].chat()) for i in idx]
        seed = stage_seed(cfg, k, f"seeds/{step}{tag}")
        params = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_p, T, seed=seed)
        # ratio_of=budget: each draft stops at its cut; the tokens before it are the same samples.
        caps = [budget_tokens(plan[i][3], T) for i in idx] if budget else None
        calls.append((step, (sources[step], ctx, params, caps)))
    return plan, calls, dict(by_source)


def _rows(s: Session, k: int, plan: list, by_source: dict, gens: dict, t: Timer) -> list[PrefixRow]:
    cfg, tok = s.cfg, s.tokenizer
    T, budget = cfg.rollout.max_new_tokens, cfg.prefix.ratio_of == "budget"
    drafts: dict[int, object] = {}
    for step, idx in by_source.items():
        for i, g in zip(idx, gens[(step, k)], strict=True):
            drafts[i] = g
    rewards: list[float | None] = [None] * len(plan)  # ratio_of=budget: no draft has its end
    if not budget:
        texts = [tok.decode(drafts[i].token_ids, skip_special_tokens=True) for i in range(len(plan))]
        with t("verification"):
            rewards = [v.reward for v in s.verifier.score_batch(texts, [p for p, *_ in plan])]
    rows = []
    for i, (p, j, step, lam) in enumerate(plan):
        g = drafts[i]
        piece_texts = [tok.decode([x]) for x in g.token_ids] if cfg.prefix.cut != "token" else None
        pre = cfg.prefix
        L = seed_length(g.token_ids, g.finished, lam, pre.ratio_of, T, pre.cut, piece_texts, pre.steps)
        if pre.cut == "steps":  # λ was drawn (the draws' order is part of the seed) but not used: record the cut
            lam = L / len(g.token_ids) if g.token_ids else 0.0
        rows.append(
            _prefix_row(s, k, p, j, step, k - step, lam, g.token_ids[:L], g.logprobs[:L], len(g.token_ids), rewards[i])
        )
    return rows


def _prefix_row(
    s: Session,
    k: int,
    p: Prompt,
    j: int,
    step: int,
    age: int,
    lam: float,
    ids,
    logps,
    draft_len: int,
    draft_reward: float | None,
) -> PrefixRow:
    return PrefixRow(
        run_id=s.run.run_id,
        iteration=k,
        prompt_id=p.prompt_id,
        seed_id=f"{k}-{p.prompt_id}-{j}",
        source_step=step,
        source_age=age,
        prefix_ratio=lam,
        prefix_token_ids=list(ids),
        behaviour_logprobs=list(logps),
        prefix_text=s.tokenizer.decode(list(ids), skip_special_tokens=True),
        draft_len=draft_len,
        draft_reward=draft_reward,
    )
