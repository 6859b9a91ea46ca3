"""continuation k: θ_k samples the on-policy responses and continues every seed to the end
(docs/algorithm.md §2.3), into rollouts/iteration=k/generated.parquet (rows pending verification).

`sample_groups` is the body: dynamic sampling's later rounds (pipeline/oversample.py) call it for
further prompts with their own seed, so every round lays out and samples its groups the same way."""

from __future__ import annotations

from collections import defaultdict

from thinking_seeds.algo.overlong import is_truncated
from thinking_seeds.config import RunConfig
from thinking_seeds.data.sources import Prompt
from thinking_seeds.engine.models import encode_prompt
from thinking_seeds.engine.rollout import SamplingParams
from thinking_seeds.pipeline.graph import stage_seed
from thinking_seeds.pipeline.rows import PrefixRow, RolloutRow, read_rows, write_rows
from thinking_seeds.pipeline.session import Session, Timer, mean
from thinking_seeds.store.manifest import Manifest


def continuation(s: Session, k: int) -> Manifest:
    """Generate iteration k's groups (`sample_groups`) and write them, pending verification."""
    cfg, run = s.cfg, s.run
    m = Manifest("continuation", k, cfg.config_hash())
    t = Timer()
    with t("io"):
        pre = read_rows(PrefixRow, run.prefixes(k)) if cfg.seeded else []
    rows, generated = sample_groups(s, k, s.iteration_prompts(k), pre, stage_seed(cfg, k, "continuation"), t)
    return generated_manifest(s, m, k, rows, generated, t)


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
    gens = s.generate(s.policy(k), ctx, params, max_new=caps, timer=t)
    finished: dict[int, bool] = {}
    for i, g in zip(gen_rows, gens, strict=True):
        r = rows[i]
        r.token_ids = r.token_ids + g.token_ids
        r.old_logprobs = r.old_logprobs + g.logprobs
        r.behaviour_logprobs = r.behaviour_logprobs + [0.0] * len(g.token_ids)
        finished[i] = g.finished
    for i, r in enumerate(rows):
        r.response_text = tok.decode(r.token_ids, skip_special_tokens=True)
        last = r.token_ids[-1] if r.token_ids else None
        r.truncated = is_truncated(len(r.token_ids), finished.get(i), last, tok.eos_token_id, T)
    return rows, sum(len(g.token_ids) for g in gens)


def _keep_seed(cfg: RunConfig, seed: PrefixRow) -> bool:
    """prefix.filter=correct_draft keeps only seeds whose whole draft was verified correct (data-set
    solutions have no draft reward and are kept)."""
    if cfg.prefix.filter == "none" or seed.draft_reward is None:
        return True
    return seed.draft_reward >= 1.0
