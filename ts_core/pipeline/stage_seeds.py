"""seeds k: offline prefix generation (SPEC §2.2). Historical checkpoints write drafts, each cut at
λ·|z|, into corpus/prefixes/iteration=k/prefixes.parquet; on-policy methods write nothing."""

from __future__ import annotations

import random
from collections import defaultdict

from thinking_seeds.algo.seeding import cut_length, draw_ratio
from thinking_seeds.data.sources import Prompt
from thinking_seeds.engine.models import encode_prompt
from thinking_seeds.engine.rollout import SamplingParams
from thinking_seeds.pipeline.graph import stage_seed
from thinking_seeds.pipeline.rows import PrefixRow, write_rows
from thinking_seeds.pipeline.session import Session, Timer, mean
from thinking_seeds.store.manifest import Manifest


def seeds(s: Session, k: int) -> Manifest:
    """Write iteration k's seeds: `seeds_per_group / continuations_per_seed` drafts per prompt."""
    cfg, run = s.cfg, s.run
    m = Manifest("seeds", k, cfg.config_hash())
    t = Timer()
    if not cfg.seeded:
        m.seconds = t.seconds
        return m  # on-policy methods have no seeds
    prompts = s.iteration_prompts(k)
    # Each draft is continued `continuations_per_seed` times by the continuation stage.
    n_drafts = cfg.rollout.seeds_per_group // cfg.rollout.continuations_per_seed
    if cfg.prefix.source == "dataset":
        rows = _dataset_seeds(s, k, prompts, n_drafts)
    else:
        rows = _historical_seeds(s, k, prompts, n_drafts, t)
    with t("io"):
        path = write_rows(PrefixRow, rows, run.prefixes(k))
    m.record(run, "prefixes", path, rows=len(rows))
    lens = [len(r.prefix_token_ids) for r in rows]
    m.metrics = {
        "seeds/mean_prefix_len": sum(lens) / max(1, len(lens)),
        "seeds/draft_reward": mean(r.draft_reward for r in rows if r.draft_reward is not None),
    }
    m.seconds = t.seconds
    return m


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


def _historical_seeds(s: Session, k: int, prompts: list[Prompt], n_drafts: int, t: Timer) -> list[PrefixRow]:
    """Pool members write whole drafts (one engine pass per source checkpoint), scored, then cut at λ."""
    cfg, run, tok = s.cfg, s.run, s.tokenizer
    rng = random.Random(stage_seed(cfg, k, "seeds"))
    pool, members = s.pool_members(k)
    # Before the first snapshot is historical (iteration 0), θ_0 itself writes the seeds:
    # its ratio π_θ/π_h is exactly 1 there, so the group keeps its shape for every method.
    sources = {c.step: c.path for c in members} or {k: run.policy(k)}
    plan = []  # (prompt, seed index, source step, λ); the draws' order is part of the seed
    for p in prompts:
        for j in range(n_drafts):
            step = pool.pick(members, rng).step if members else k
            plan.append((p, j, step, draw_ratio(rng, cfg.prefix.ratio_min, cfg.prefix.ratio_max)))
    by_source: dict[int, list[int]] = defaultdict(list)
    for i, (_, _, step, _) in enumerate(plan):
        by_source[step].append(i)
    drafts: dict[int, object] = {}
    order = sorted(by_source.items())
    calls = []  # one per pool member: (checkpoint, contexts, params with its own seed, max_new)
    for step, idx in order:
        ctx = [encode_prompt(tok, plan[i][0].chat()) for i in idx]
        params = SamplingParams(
            cfg.rollout.temperature,
            cfg.rollout.top_p,
            cfg.rollout.max_new_tokens,
            seed=stage_seed(cfg, k, f"seeds/{step}"),
        )
        calls.append((sources[step], ctx, params, None))
    # Sharded by rollout.batch_size (Session.generate_many): one weight swap and call per member, on this
    # process's engine or the Ray rollout workers; or, vLLM serving LoRA adapters per request, ONE call.
    for (_, idx), gens in zip(order, s.generate_many(calls, timer=t), strict=True):
        for i, g in zip(idx, gens, strict=True):
            drafts[i] = g
    texts = [tok.decode(drafts[i].token_ids, skip_special_tokens=True) for i in range(len(plan))]
    with t("verification"):
        verdicts = s.verifier.score_batch(texts, [p for p, *_ in plan])
    rows = []
    for i, (p, j, step, lam) in enumerate(plan):
        g = drafts[i]
        piece_texts = [tok.decode([x]) for x in g.token_ids] if cfg.prefix.cut == "line" else None
        L = cut_length(g.token_ids, lam, cfg.prefix.cut, piece_texts)
        rows.append(
            _prefix_row(
                s, k, p, j, step, k - step, lam, g.token_ids[:L], g.logprobs[:L], len(g.token_ids), verdicts[i].reward
            )
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
