"""A continuation batch on vLLM with prompt sharing (32-token KV blocks, our CPU default) and without
(vLLM's CPU default of 128-token blocks, which no preset's prompt fills), and 32-token blocks with
caching off, which separates the sharing from the block size (issue #12, item 3).

    OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/vllm_prefix_cache.py [--preset tiny|smollm2] [--rounds 5]

The batch is the continuation stage's shape for the preset: `rollout.prompts_per_iteration` train
prompts (chat template applied), each with `group_size - seeds_per_group` on-policy requests (cap T)
and `seeds_per_group` seeded ones (prompt + a prefix, cap T - len(prefix)). The prefixes are the
first ⌊λ·n⌋ tokens (λ from the preset's prefix.ratio_min..max) of drafts the same model samples
once before timing. Three engines on the same weights (32, 128, 32 without caching); every round each
samples the batch once (the order turned each round) with the prefix cache reset first, as a
weight swap resets it in the pipeline, so only the sharing inside one call counts. Prints, per
engine, the prompt tokens served from the prefix cache (exact, vLLM's `num_cached_tokens`), the
wall and CPU seconds of the call (medians; CPU: this process, where vLLM runs with
VLLM_ENABLE_V1_MULTIPROCESSING=0), and the ratio 32 / 128 (median of per-round ratios).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def train_prompts(cfg, tok) -> list[list[int]]:
    """The first `rollout.prompts_per_iteration` prompts of the preset's train split, as token ids."""
    from thinking_seeds.data.builtin_tasks import build_splits
    from thinking_seeds.data.sources import load_dataset
    from thinking_seeds.engine.models import encode_prompt

    with tempfile.TemporaryDirectory() as d:
        paths = build_splits(Path(d), cfg.data)
        prompts = load_dataset(paths["train"])[: cfg.rollout.prompts_per_iteration]
    return [encode_prompt(tok, p.chat()) for p in prompts]


@contextmanager
def no_prefix_caching():
    """VLLMEngine's LLM(...) with enable_prefix_caching=False (the engine itself always enables it)."""
    import vllm

    real = vllm.LLM

    class LLMNoCache(real):
        def __init__(self, *args, **kw):
            super().__init__(*args, **{**kw, "enable_prefix_caching": False})

    vllm.LLM = LLMNoCache
    try:
        yield
    finally:
        vllm.LLM = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", help="tiny or smollm2 (`make smollm2` builds its model)")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    import vllm

    from thinking_seeds.config import load_config
    from thinking_seeds.engine.models import resolve_model_path
    from thinking_seeds.engine.rollout import SamplingParams
    from thinking_seeds.engine.vllm_engine import CPU_BLOCK_SIZE, VLLMEngine

    cfg = load_config(a.preset, ["rollout.engine=vllm"])
    ckpt = resolve_model_path(cfg.model.path)
    r = cfg.rollout
    T = r.max_new_tokens
    seqs = r.prompts_per_iteration * r.group_size
    engines = {f"block {bs}": VLLMEngine(ckpt, cfg, block_size=bs, max_num_seqs=seqs) for bs in (CPU_BLOCK_SIZE, 128)}
    # The block size alone, caching off: what the smaller blocks change besides sharing the prompts.
    with no_prefix_caching():
        engines[f"{CPU_BLOCK_SIZE}, no cache"] = VLLMEngine(ckpt, cfg, block_size=CPU_BLOCK_SIZE, max_num_seqs=seqs)
    first = next(iter(engines.values()))
    prompts = train_prompts(cfg, first.llm.get_tokenizer())
    n_seeded, n_on = r.seeds_per_group, r.group_size - r.seeds_per_group
    drafts = first.generate([p for p in prompts for _ in range(n_seeded)], SamplingParams(r.temperature, 1.0, T, 7))
    rng = random.Random(0)
    ctx, caps = [], []
    for i, p in enumerate(prompts):
        for _ in range(n_on):
            ctx.append(p)
            caps.append(T)
        for j in range(n_seeded):
            d = drafts[i * n_seeded + j].token_ids
            pre = d[: int(rng.uniform(cfg.prefix.ratio_min, cfg.prefix.ratio_max) * len(d))]
            ctx.append(p + pre)
            caps.append(T - len(pre))
    params = SamplingParams(r.temperature, 1.0, T, seed=11)

    names = list(engines)
    res: dict[str, list[dict]] = {n: [] for n in names}
    for n in names:  # warm-up, untimed
        engines[n].llm.reset_prefix_cache()
        engines[n].generate(ctx, params, caps)
    load0 = os.getloadavg()
    for rnd in range(a.rounds):
        for n in names[rnd % len(names) :] + names[: rnd % len(names)]:
            eng = engines[n]
            eng.llm.reset_prefix_cache()
            before = dict(eng.prefix_cache)
            w0, c0 = time.perf_counter(), time.process_time()
            gens = eng.generate(ctx, params, caps)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            res[n].append(
                {
                    "wall": wall,
                    "cpu": cpu,
                    "prompt": eng.prefix_cache["prompt_tokens"] - before["prompt_tokens"],
                    "cached": eng.prefix_cache["cached_tokens"] - before["cached_tokens"],
                    "tokens": sum(len(g.token_ids) for g in gens),
                }
            )
            print(f"round {rnd} {n}: wall {wall:.3f} s, cpu {cpu:.3f} s", flush=True)
    load1 = os.getloadavg()
    for eng in engines.values():
        eng.close()

    pl = [len(p) for p in prompts]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"torch {torch.__version__}, vllm {vllm.__version__}; load average {load0[0]:.2f} at the start, "
        f"{load1[0]:.2f} at the end"
    )
    print(
        f"preset {a.preset} ({ckpt.name}): {len(prompts)} prompts of {min(pl)}-{max(pl)} tokens x {r.group_size} "
        f"requests ({n_on} on-policy, {n_seeded} seeded), T = {T}; medians of {a.rounds} rounds, prefix cache reset "
        "before each call"
    )
    print(f"{'engine':14} {'prompt tokens':>13} {'cached':>7} {'share':>6} {'sampled':>7} {'wall s':>7} {'cpu s':>7}")
    med = statistics.median
    for n in names:
        x = res[n]
        print(
            f"{n:14} {x[0]['prompt']:13d} {x[0]['cached']:7d} {x[0]['cached'] / x[0]['prompt']:6.1%} "
            f"{x[0]['tokens']:7d} {med(y['wall'] for y in x):7.3f} {med(y['cpu'] for y in x):7.3f}"
        )
    for a0, b0 in ((names[0], names[1]), (names[0], names[2]), (names[2], names[1])):
        for key in ("wall", "cpu"):
            rs = [x[key] / y[key] for x, y in zip(res[a0], res[b0], strict=True)]
            print(f"{a0} / {b0}, {key}: {med(rs):.3f}x (per round: {', '.join(f'{v:.3f}' for v in rs)})")


if __name__ == "__main__":
    main()
