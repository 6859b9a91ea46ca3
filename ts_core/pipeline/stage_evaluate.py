"""evaluate k: held-out avg@n and pass@k of θ_{k+1} every `eval.every` iterations (k = -1: θ_0),
and, for the final policy, the explorable solution space: pass@k of continuations of its own
historical seeds (docs/algorithm.md §5). `evaluate_policy` is also what `ts eval` and the final test run."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa

from thinking_seeds.data.sources import Prompt
from thinking_seeds.evals.evaluation import EvalResult, evaluate_prompts
from thinking_seeds.pipeline.graph import eval_due, stage_seed
from thinking_seeds.pipeline.seed_plan import draft_calls, draw_seeds, seed_tokens
from thinking_seeds.pipeline.session import Session, Timer
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.schemas import PER_PROMPT_SCHEMA


def evaluate(s: Session, k: int) -> Manifest:
    m = Manifest("evaluate", k, s.cfg.config_hash())
    t = Timer()
    if eval_due(s.cfg, k):
        # The seeded (explorable-space) evaluation doubles the cost: only for the final policy.
        metrics = evaluate_policy(s, k + 1, t, seeded=s.cfg.eval.seeded and k == s.cfg.iterations - 1)
        # The file holds the evaluation's time too (time/evaluate/*: every run's, read as any stage's);
        # the manifest's metrics stay the evaluation's results.
        written = s.run.write_metrics(k + 1, "evaluate", {**metrics, **time_metrics(t)})
        m.record(s.run, "metrics", written)
        m.metrics = metrics
    m.seconds = t.seconds
    return m


def time_metrics(t: Timer) -> dict[str, float]:
    """`time/evaluate/<part>`: seconds of generation, verification, the seeded evaluation's drafts,
    generation and verification, weights and model loads."""
    return {f"time/evaluate/{part}": sec for part, sec in t.seconds.items()}


def evaluate_policy(
    s: Session, step: int, t: Timer | None = None, seeded: bool = False, per_prompt_out: Path | None = None
) -> dict[str, float]:
    """Held-out avg@n and pass@k of θ_step (the metrics are labelled with the policy step).

    `per_prompt_out`: also write one row per prompt (correct count, distinct solution labels,
    their entropy; plain and, with `seeded`, seeded) to that Parquet file — what the comparison's
    hard-subset and explorable-space measures are computed from.
    """
    cfg = s.cfg
    t = t or Timer()
    s.use_weights(s.policy(step), t)
    prompts = s.prompts(cfg.eval.split)[: cfg.eval.prompts]
    res = _sampled(s, step, prompts, t, "evaluate", progress=f"evaluate θ_{step} ({cfg.eval.split})")
    metrics = res.flat("eval")
    rows = [dict(r, mode="plain") for r in res.per_prompt]
    if seeded:
        seeded_metrics, seeded_rows = _seeded_eval(s, step, prompts, t)
        metrics.update(seeded_metrics)
        rows += [dict(r, mode="seeded") for r in seeded_rows]
    if per_prompt_out is not None:
        write_table_atomic(
            pa.Table.from_pylist([dict(r, step=step) for r in rows], schema=PER_PROMPT_SCHEMA),
            per_prompt_out,
            schema=PER_PROMPT_SCHEMA,
        )
    return metrics


def _seeded_eval(s: Session, step: int, prompts: list[Prompt], t: Timer) -> tuple[dict[str, float], list[dict]]:
    """Explorable solution space (docs/algorithm.md §5): θ_step continuing seeds from its historical pool.

    Same prompts and sample count as the plain evaluation, so the two pass@k curves compare
    directly. Uses the method's λ range, or U[0.2, 0.6] for methods without prefixes.
    """
    cfg = s.cfg
    pool, members = s.pool_members(step)
    if not members:
        return {}, []
    lo, hi = (cfg.prefix.ratio_min, cfg.prefix.ratio_max) if cfg.prefix.ratio_max < 1.0 else (0.2, 0.6)
    rng = random.Random(stage_seed(cfg, step, "evaluate/seeded"))
    n = cfg.eval.samples
    plan = draw_seeds(prompts, n, pool, members, rng, (lo, hi), step)  # as the seeds stage draws
    calls = draft_calls(
        cfg, s.tokenizer, plan, lambda src: stage_seed(cfg, step, f"evaluate/seeded/{src}"), cfg.eval.temperature, 1.0
    )
    drafts: dict[int, list[int]] = {}
    for c in calls:
        s.use_weights(next(m.path for m in members if m.step == c.source_step), t)
        with t("seeded_drafts"):
            gens = s.engine(t).generate(c.contexts, c.params, max_new=c.caps)
            for j, g in zip(c.draws, gens, strict=True):
                drafts[j] = g.token_ids[: seed_tokens(cfg, s.tokenizer, g, plan[j].ratio)]
    s.use_weights(s.policy(step), t)
    prefixes = [drafts[j] for j in range(len(plan))]
    res = _sampled(
        s, step, prompts, t, "evaluate/cont", prefixes=prefixes, part="seeded_", progress=f"evaluate θ_{step} seeded"
    )
    return res.flat("eval_seeded"), res.per_prompt


def _sampled(s: Session, step: int, prompts: list[Prompt], t: Timer, seed_name: str, **options) -> EvalResult:
    """θ_step's eval.samples samples per prompt (in the engine, its weights loaded), scored: `evaluate_prompts`
    with the run's eval settings and the sampling seed of (step, `seed_name`)."""
    cfg = s.cfg
    return evaluate_prompts(
        s.engine(t),
        s.tokenizer,
        prompts,
        s.verifier,
        n=cfg.eval.samples,
        temperature=cfg.eval.temperature,
        max_new_tokens=cfg.rollout.max_new_tokens,
        seed=stage_seed(cfg, step, seed_name),
        label=s.label(),
        timer=t,
        **options,
    )
