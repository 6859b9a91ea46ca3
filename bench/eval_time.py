"""Where an evaluation's time goes on the tiny preset, and its samples/s against the continuation's.

    OMP_NUM_THREADS=1 .venv/bin/python bench/eval_time.py [--rounds 3] [--prompts 64] [--samples 16]

The tiny preset's evaluation (eval.prompts x eval.samples of θ_0 on the validation split, the
preset's max_new_tokens, one HF engine call) split into its parts, each timed alone, interleaved
over rounds:

  generation     engine.generate of every sample (the sampling itself)
  decode         tokenizer.decode of every response
  verify         the verifier's score_batch as it is now (a repeated answer to the same prompt
                 scored once: data/rewards.py), and `verify_all`: every answer sent to the pool,
                 as before that change (the workers already started: a run's pool is shared)
  continuation   one iteration's continuation-stage sampling (prompts_per_iteration x group_size
                 on-policy samples, the same engine): the training side's samples/s

Prints the medians and the samples/s of the evaluation's generation and the continuation's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=None, help="default: the preset's eval.prompts")
    ap.add_argument("--samples", type=int, default=None, help="default: the preset's eval.samples")
    a = ap.parse_args()

    from thinking_seeds.config import load_config
    from thinking_seeds.data.builtin_tasks import build_splits
    from thinking_seeds.data.rewards import Verifier
    from thinking_seeds.data.sources import load_dataset
    from thinking_seeds.engine.models import encode_prompt, load_model, resolve_model_path
    from thinking_seeds.engine.rollout import HFEngine, SamplingParams

    cfg = load_config("tiny")
    n_prompts, n = a.prompts or cfg.eval.prompts, a.samples or cfg.eval.samples
    model, tok = load_model(resolve_model_path(cfg.model.path), cfg.model.dtype)
    engine = HFEngine(model, tok, batch_size=cfg.rollout.batch_size)
    with tempfile.TemporaryDirectory() as d:
        build_splits(Path(d), cfg.data)
        val = load_dataset(Path(d) / "validation.parquet")[:n_prompts]
        train = load_dataset(Path(d) / "train.parquet")[: cfg.rollout.prompts_per_iteration]
    T = cfg.rollout.max_new_tokens
    ev_ctx = [encode_prompt(tok, p.chat()) for p in val for _ in range(n)]
    ev_prompts = [p for p in val for _ in range(n)]
    tr_ctx = [encode_prompt(tok, p.chat()) for p in train for _ in range(cfg.rollout.group_size)]
    times: dict[str, list[float]] = {k: [] for k in ("generation", "decode", "verify", "verify_all", "continuation")}
    unique = []
    with Verifier(backend=cfg.reward.backend, timeout_s=cfg.reward.timeout_s) as v:
        v.score_batch(["\\boxed{1}"], val[:1])  # the pool started, as in a run
        for r in range(a.rounds):
            t = time.perf_counter()
            gens = engine.generate(ev_ctx, SamplingParams(cfg.eval.temperature, 1.0, T, seed=r, feed_context=True))
            times["generation"].append(time.perf_counter() - t)
            t = time.perf_counter()
            texts = [tok.decode(g.token_ids, skip_special_tokens=True) for g in gens]
            times["decode"].append(time.perf_counter() - t)
            sides = (
                [("verify", None), ("verify_all", "all")] if r % 2 == 0 else [("verify_all", "all"), ("verify", None)]
            )
            got = {}
            for name, mode in sides:
                run = Verifier._run
                sent: list[int] = []
                if mode == "all":
                    t = time.perf_counter()
                    got[name] = _score_all(v, texts, ev_prompts)
                    times[name].append(time.perf_counter() - t)
                else:
                    Verifier._run = lambda self, items, run=run, sent=sent: sent.append(len(items)) or run(self, items)
                    try:
                        t = time.perf_counter()
                        got[name] = v.score_batch(texts, ev_prompts)
                        times[name].append(time.perf_counter() - t)
                    finally:
                        Verifier._run = run
                    unique.append(sent[0] if sent else 0)
            same = [(x.reward, x.status) for x in got["verify"]] == [(x.reward, x.status) for x in got["verify_all"]]
            t = time.perf_counter()
            engine.generate(tr_ctx, SamplingParams(cfg.rollout.temperature, 1.0, T, seed=100 + r))
            times["continuation"].append(time.perf_counter() - t)
            print(
                f"round {r}: "
                + ", ".join(f"{k} {x[-1]:.2f} s" for k, x in times.items())
                + f"; {unique[-1]} distinct answers scored of {len(texts)}; same verdicts {same}; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    med = {k: statistics.median(x) for k, x in times.items()}
    total = med["generation"] + med["decode"] + med["verify"]
    print(f"tiny preset evaluation, {n_prompts} prompts x {n} samples, {T} new tokens, medians of {a.rounds} rounds:")
    for k in ("generation", "decode", "verify"):
        print(f"  {k:12s} {med[k]:6.2f} s  {100 * med[k] / total:4.1f}%")
    print(f"  verify as before (every answer to the pool): {med['verify_all']:.2f} s")
    print(
        f"  samples/s: evaluation's generation {len(ev_ctx) / med['generation']:.1f}, the continuation's "
        f"{len(tr_ctx) / med['continuation']:.1f} ({len(tr_ctx)} samples in {med['continuation']:.2f} s)"
    )


def _score_all(v, texts, prompts):
    """score_batch without the dedupe: each answer sent to the pool as its own item (what the
    verifier did before), through the same workers."""
    from thinking_seeds.data.verdicts import Verdict, last_boxed

    answers = [last_boxed(t) for t in texts]
    items = {
        i: (a, prompts[i].ground_truth, prompts[i].data_source, prompts[i].rg_entry)
        for i, a in enumerate(answers)
        if a is not None
    }
    with v._lock:
        results = v._run(items)
    out = [Verdict(0.0, "no_answer", None) if a is None else None for a in answers]
    for i, (reward, status, detail) in results.items():
        out[i] = Verdict(reward, status, answers[i], detail)
    return out


if __name__ == "__main__":
    main()
