"""Padded micro-batches vs token-budget ones (update.max_tokens_per_micro_batch, update.packed).

    python bench/micro_batches.py [--models tiny,qwen40m] [--seqs 64] [--rounds 3]

One gradient-accumulation step of the update (train/update_loop.train_on_batch, fp32, a zero-lr
SGD so every side starts from the same θ) over a batch with a realistic length spread: prompts of
20-40 tokens, responses log-normal (median ~e^3.4 = 30 tokens, a long tail cut at max_new_tokens, as
sampling at temperature 1 gives). Sides, interleaved in every round:

  padded    update.micro_batch_size sequences in the shuffled order, padded to their longest
  budget    update.max_tokens_per_micro_batch = micro_batch_size x (longest prompt + max_new_tokens),
            the padded side's worst-case tensor (the same memory bound): length-sorted, trimmed
  packed    the same budget, update.packed: one row per micro-batch, no padding at all

Models: the tiny preset's bundled model, and a random ~40M-parameter Qwen2 built here (no
download). Prints the median seconds per side, the tokens each side computes, and the ratio to
the padded side.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def qwen40m():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    return Qwen2ForCausalLM(cfg).float(), 0


def tiny():
    from thinking_seeds.engine.models import load_model

    model, tok = load_model("builtin:tiny", "float32")
    return model, tok.pad_token_id


def spread_batch(n: int, vocab: int, max_new: int, seed: int = 0):
    from thinking_seeds.train.batch import Batch

    rng = random.Random(seed)
    ctx = [[rng.randrange(1, vocab) for _ in range(rng.randint(20, 40))] for _ in range(n)]
    resp = [
        [rng.randrange(1, vocab) for _ in range(max(1, min(max_new, int(rng.lognormvariate(3.4, 0.9)))))]
        for _ in range(n)
    ]
    return Batch(
        contexts=ctx,
        responses=resp,
        old_logprobs=[[-2.0] * len(r) for r in resp],
        behaviour_logprobs=[[-2.0] * len(r) for r in resp],
        prefix_len=[0] * n,
        seeded=[False] * n,
        advantages=[rng.uniform(-1, 1) for _ in range(n)],
        source_age=[-1] * n,
    )


def main() -> None:
    import torch

    from thinking_seeds.config import load_config
    from thinking_seeds.train.micro_batches import micro_batch_tokens
    from thinking_seeds.train.update_loop import plan, train_on_batch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,qwen40m")
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--micro-batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for name in a.models.split(","):
        model, pad = {"tiny": tiny, "qwen40m": qwen40m}[name]()
        model.train()
        batch = spread_batch(a.seqs, model.config.vocab_size, a.max_new_tokens)
        budget = a.micro_batch_size * (max(len(c) for c in batch.contexts) + a.max_new_tokens)
        common = [
            "update.launcher=in_process",
            f"update.micro_batch_size={a.micro_batch_size}",
            f"rollout.max_new_tokens={a.max_new_tokens}",
        ]
        sides = {
            "padded": load_config("tiny", common),
            "budget": load_config("tiny", [*common, f"update.max_tokens_per_micro_batch={budget}"]),
            "packed": load_config(
                "tiny", [*common, f"update.max_tokens_per_micro_batch={budget}", "update.packed=true"]
            ),
        }
        tokens, n_micro = {}, {}
        for side, cfg in sides.items():
            ((_, micro),) = plan(batch, cfg, 0, 0, 1)
            lengths = [[(len(batch.contexts[i]), len(batch.responses[i])) for i in m] for m in micro]
            tokens[side] = sum(micro_batch_tokens(x, cfg.update.packed) for x in lengths)
            n_micro[side] = len(micro)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        times: dict[str, list[float]] = {s: [] for s in sides}
        for _ in range(a.rounds):
            for side, cfg in sides.items():  # interleaved: every round runs every side once
                t0 = time.perf_counter()
                train_on_batch(model, batch, cfg, pad, opt)
                times[side].append(time.perf_counter() - t0)
        real = sum(len(c) + len(r) for c, r in zip(batch.contexts, batch.responses, strict=True))
        params = sum(p.numel() for p in model.parameters()) / 1e6
        print(f"{name} ({params:.1f}M params), {a.seqs} sequences, {real} real tokens, budget {budget} tokens:")
        base = statistics.median(times["padded"])
        for side in sides:
            med = statistics.median(times[side])
            print(
                f"  {side:7} {med:7.3f} s  ({n_micro[side]:2d} micro-batches, {tokens[side]:6d} tokens computed)  "
                f"ratio to padded {med / base:.3f}  rounds {' '.join(f'{t:.3f}' for t in times[side])}",
                flush=True,
            )


if __name__ == "__main__":
    main()
