"""Padded micro-batches vs token-budget ones (update.max_tokens_per_micro_batch, update.packed).

    python bench/micro_batches.py [--models tiny,qwen40m] [--seqs 64] [--rounds 3]
    python bench/micro_batches.py --preset countdown --budgets 2048,4096,8192,16384 [--rounds 5]

One gradient-accumulation step of the update (train/update_loop.train_on_batch, fp32, a zero-lr
SGD so every side starts from the same θ) over a batch with a realistic length spread: prompts of
20-40 tokens, responses log-normal (median ~e^3.4 = 30 tokens, a long tail cut at max_new_tokens, as
sampling at temperature 1 gives). Sides, interleaved in every round:

  padded    update.micro_batch_size sequences in the shuffled order, padded to their longest
  budget    update.max_tokens_per_micro_batch = micro_batch_size x (longest prompt + max_new_tokens),
            the padded side's worst-case tensor (the same memory bound): length-sorted, trimmed
  packed    the same budget, update.packed: one row per micro-batch, no padding at all

With --preset, the whole update of one iteration of that preset instead (its model, its
prompts -- the train split's first prompts_per_iteration x group_size, chat-encoded --, its
max_new_tokens, micro_batch_size and mini_batches), padded against each budget of --budgets: how
each preset's update.max_tokens_per_micro_batch was chosen (the fastest budget).

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


def spread_batch(n: int, vocab: int, max_new: int, seed: int = 0, contexts: list[list[int]] | None = None):
    from thinking_seeds.train.batch import Batch

    rng = random.Random(seed)
    ctx = contexts or [[rng.randrange(1, vocab) for _ in range(rng.randint(20, 40))] for _ in range(n)]
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
        token_weights=[[] for _ in range(n)],
    )


def preset_side(preset: str, budgets: list[int], rounds: int) -> None:
    """The update of one iteration of `preset`: padded (its micro_batch_size) against each budget."""
    import tempfile
    from pathlib import Path

    import torch

    from thinking_seeds.config import load_config
    from thinking_seeds.data.builtin_tasks import build_splits
    from thinking_seeds.data.sources import load_dataset
    from thinking_seeds.engine.models import encode_prompt, load_model, resolve_model_path
    from thinking_seeds.train.micro_batches import micro_batch_tokens
    from thinking_seeds.train.update_loop import plan, train_on_batch

    padded = load_config(preset, ["update.launcher=in_process", "update.max_tokens_per_micro_batch=null"])
    r, u = padded.rollout, padded.update
    model, tok = load_model(resolve_model_path(padded.model.path), padded.model.dtype)
    model.train()
    with tempfile.TemporaryDirectory() as d:
        build_splits(Path(d), padded.data)
        rows = load_dataset(Path(d) / "train.parquet")[: r.prompts_per_iteration]
    prompts = [encode_prompt(tok, row.chat()) for row in rows]
    contexts = [p for p in prompts for _ in range(r.group_size)]
    batch = spread_batch(len(contexts), model.config.vocab_size, r.max_new_tokens, contexts=contexts)
    sides = {"padded": padded}
    for b in budgets:
        sides[f"budget {b}"] = load_config(
            preset, ["update.launcher=in_process", f"update.max_tokens_per_micro_batch={b}"]
        )
    real = sum(len(c) + len(x) for c, x in zip(batch.contexts, batch.responses, strict=True))
    print(
        f"{preset}: {len(contexts)} sequences ({r.prompts_per_iteration} prompts x {r.group_size}), contexts "
        f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens, max_new_tokens {r.max_new_tokens}, "
        f"{u.mini_batches} optimizer steps, micro_batch_size {u.micro_batch_size}, {real} real tokens",
        flush=True,
    )
    shape = {}
    for side, cfg in sides.items():
        steps = plan(batch, cfg, 0, 0, 1)
        micro = [m for _, ms in steps for m in ms]
        lengths = [[(len(batch.contexts[i]), len(batch.responses[i])) for i in m] for m in micro]
        shape[side] = (len(micro), sum(micro_batch_tokens(x, False) for x in lengths))
    times: dict[str, list[float]] = {s: [] for s in sides}
    for k in range(rounds):
        order = list(sides) if k % 2 == 0 else list(reversed(sides))  # interleaved, the order turned
        for side in order:
            opt = torch.optim.SGD(model.parameters(), lr=0.0)
            t0 = time.perf_counter()
            train_on_batch(model, batch, sides[side], tok.pad_token_id, opt)
            times[side].append(time.perf_counter() - t0)
    base = statistics.median(times["padded"])
    for side in sides:
        med = statistics.median(times[side])
        n, tokens = shape[side]
        print(
            f"  {side:12} {med:7.3f} s  ({n:3d} micro-batches, {tokens:6d} tokens computed)  ratio to padded "
            f"{med / base:.3f}  rounds {' '.join(f'{t:.3f}' for t in times[side])}",
            flush=True,
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
    ap.add_argument("--preset", default=None, help="time one iteration's update of this preset instead")
    ap.add_argument("--budgets", default="2048,4096,8192,16384", help="with --preset: the budgets to time")
    a = ap.parse_args()
    if a.preset:
        preset_side(a.preset, [int(b) for b in a.budgets.split(",")], a.rounds)
        return
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
            "padded": load_config("tiny", [*common, "update.max_tokens_per_micro_batch=null"]),
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
