"""Generation throughput of HFEngine vs VLLMEngine on one Thinking Seeds iteration's pattern.

The pattern of one iteration (docs/algorithm.md §2): seeds from two historical checkpoints (two weight swaps,
each writing half of the seeds), cut at λ ~ U[0.2, 0.6]; then the current policy (a third swap)
samples the on-policy responses and continues every seed. Both engines run the same pattern in the
same process on the same three checkpoints (the base model and two perturbed copies); the number
reported is generated tokens per second of wall time, swaps included, with the swap time also
shown on its own.

    .venv-vllm/bin/python bench/engines.py                      # tiny + smollm2, defaults below
    .venv-vllm/bin/python bench/engines.py --models tiny --prompts 16 --group 8 --seeds 4

Run it single-threaded (OMP_NUM_THREADS=1, as CI does); the vLLM environment has both engines.
`tiny` is data/models/tiny-chainsum when built, else a random model of the same architecture
(random weights rarely emit EOS, so its responses run to the cap: more tokens, same per-token cost).
`smollm2` needs `python -m thinking_seeds.train.smollm2` first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from thinking_seeds.algo.seeding import cut_length  # noqa: E402
from thinking_seeds.config import load_config  # noqa: E402
from thinking_seeds.data.chain_sum import CHARSET, question  # noqa: E402
from thinking_seeds.engine.models import BUILTIN_MODELS, char_tokenizer, encode_prompt, load_model, tiny_llama  # noqa: E402
from thinking_seeds.engine.rollout import HFEngine, SamplingParams  # noqa: E402


def make_checkpoints(name: str, work: Path) -> list[Path]:
    """[historical A, historical B, current]: the base model and two copies with perturbed weights."""
    if name == "tiny":
        src = BUILTIN_MODELS["tiny"]
        if not (src / "config.json").exists():
            src = work / "tiny-random"
            tok = char_tokenizer(CHARSET)
            tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id).save_pretrained(src)
            tok.save_pretrained(src)
    elif name == "smollm2":
        src = BUILTIN_MODELS["smollm2"]
        if not (src / "config.json").exists():
            raise SystemExit("smollm2 is not built: run `python -m thinking_seeds.train.smollm2` first")
    else:
        src = Path(name)
    model, tok = load_model(src)
    out = [src]
    for i in (1, 2):
        g = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 1e-3 * (p.std() if p.numel() > 1 else 1))
        d = work / f"{Path(name).name}-ckpt{i}"
        model.save_pretrained(d)
        tok.save_pretrained(d)
        out.append(d)
    return out


def iteration(engine, tok, ckpts, prompts, group, seeds, max_new, temperature, seed) -> dict:
    """Run one iteration's generation; returns token counts and seconds (generation vs swaps)."""
    rng = random.Random(seed)
    ctx = [encode_prompt(tok, [{"role": "user", "content": q}]) for q in prompts]
    gen_s = swap_s = 0.0
    tokens = 0
    # Seeds: half of each group's seed slots from checkpoint A, half from B.
    plan = [(i, j) for i in range(len(prompts)) for j in range(seeds)]
    prefixes: list[tuple[int, list[int]]] = []
    for h, ck in enumerate(ckpts[:2]):
        t = time.perf_counter()
        engine.load_weights(ck)
        swap_s += time.perf_counter() - t
        rows = [(i, j) for i, j in plan if j % 2 == h]
        t = time.perf_counter()
        gens = engine.generate([ctx[i] for i, _ in rows], SamplingParams(temperature, 1.0, max_new, seed=seed + h))
        gen_s += time.perf_counter() - t
        tokens += sum(len(g.token_ids) for g in gens)
        for (i, _), g in zip(rows, gens, strict=True):
            prefixes.append((i, g.token_ids[: cut_length(g.token_ids, rng.uniform(0.2, 0.6))]))
    # Continuation: on-policy samples + every seed continued, under the current policy.
    t = time.perf_counter()
    engine.load_weights(ckpts[2])
    swap_s += time.perf_counter() - t
    cont = [(ctx[i], []) for i in range(len(prompts)) for _ in range(group - seeds)] + [
        (ctx[i], p) for i, p in prefixes
    ]
    t = time.perf_counter()
    gens = engine.generate(
        [c + p for c, p in cont],
        SamplingParams(temperature, 1.0, max_new, seed=seed + 2),
        max_new=[max_new - len(p) for _, p in cont],
    )
    gen_s += time.perf_counter() - t
    tokens += sum(len(g.token_ids) for g in gens)
    return {
        "tokens": tokens,
        "gen_s": gen_s,
        "swap_s": swap_s,
        "total_s": gen_s + swap_s,
        "tok_per_s": tokens / (gen_s + swap_s),
        "gen_tok_per_s": tokens / gen_s,
    }


def bench_model(name: str, args, work: Path) -> dict:
    ckpts = make_checkpoints(name, work)
    model, tok = load_model(ckpts[0])
    rng = random.Random(0)
    prompts = []
    for _ in range(args.prompts):
        n = rng.randint(2, 3)
        expr = str(rng.randint(0, 99)) + "".join(f"{rng.choice('+-')}{rng.randint(0, 99)}" for _ in range(n - 1))
        prompts.append(question(expr))
    res = {
        "model": name,
        "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "prompts": args.prompts,
        "group": args.group,
        "seeds": args.seeds,
        "max_new": args.max_new,
    }
    cfg = load_config("tiny", [f"rollout.batch_size={args.prompts * args.group}"])

    t = time.perf_counter()
    hf = HFEngine(model, tok, batch_size=args.prompts * args.group)
    hf.loaded_from = str(ckpts[0])
    res["hf_start_s"] = time.perf_counter() - t
    from thinking_seeds.engine.vllm_engine import VLLMEngine

    t = time.perf_counter()
    vl = VLLMEngine(ckpts[0], cfg)
    res["vllm_start_s"] = time.perf_counter() - t
    # One untimed warm-up pass each (first-call allocations, oneDNN primitive creation).
    for eng in (hf, vl):
        eng.generate(
            [encode_prompt(tok, [{"role": "user", "content": prompts[0]}])] * 2, SamplingParams(max_new_tokens=4)
        )
    for label, eng in (("hf", hf), ("vllm", vl)):
        runs = [
            iteration(eng, tok, ckpts, prompts, args.group, args.seeds, args.max_new, args.temperature, 100 + r)
            for r in range(args.repeats)
        ]
        best = max(runs, key=lambda r: r["tok_per_s"])
        res[label] = {k: round(v, 3) if isinstance(v, float) else v for k, v in best.items()}
        print(
            f"  {name:8s} {label:5s} {best['tokens']:6d} tokens  gen {best['gen_s']:7.2f} s  "
            f"swaps {best['swap_s']:6.2f} s"
            f"  -> {best['tok_per_s']:8.1f} tok/s (generation only {best['gen_tok_per_s']:8.1f})",
            flush=True,
        )
    vl.close()
    res["ratio_vllm_over_hf"] = round(res["vllm"]["tok_per_s"] / res["hf"]["tok_per_s"], 2)
    print(f"  {name:8s} vLLM / HF = {res['ratio_vllm_over_hf']:.2f}x", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,smollm2", help="comma-separated: tiny, smollm2, or a checkpoint dir")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import vllm

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads "
        f"{torch.get_num_threads()}, torch {torch.__version__}, vllm {vllm.__version__}",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="ts-bench-"))
    out = []
    try:
        for name in args.models.split(","):
            out.append(bench_model(name.strip(), args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
