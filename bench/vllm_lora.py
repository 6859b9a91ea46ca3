"""The seeds stage's generation from a pool of LoRA checkpoints on vLLM: ONE call with an adapter per request
vs one weight swap and call per checkpoint (issue #13; BENCHMARKS.md).

    OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/vllm_lora.py                 # SmolLM2, pool of 4, 3 rounds
    OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/vllm_lora.py --model tiny --rounds 3

The pool is `--pool` LoRA adapters (peft, rank `--rank` on q/k/v/o_proj, random B so that every member
samples something else) of one base model, laid out as a LoRA run lays them out (`policy/step_000000` the
base, `policy/step_00000k` adapter directories). One round is one iteration's seeds: `--prompts` chain_sum
questions x `--drafts` drafts each, every draft's writer drawn uniformly from the pool (as `pool.pick:
uniform`), `--max-new` tokens at T = 1, cut into shards of `--batch` requests with their seeds exactly as
`Session.generate_many` cuts them (it is the code that runs: `engine/sharding.generate_sharded_many` on a
`LocalRollout`). Three ways to sample the same requests with the same seeds:

  one_call      rollout.lora_requests=true: ONE vLLM call, each request with its member's LoRARequest
  per_ckpt      the same engine (adapters), one call per member (no swap: the adapter changes per call)
  swaps         rollout.lora_requests=false: per member, its merged full weights (peft merge, kept on disk
                after the first visit) are swapped in (`reload_weights`), then one call

Each engine lives in its own process (two in-process vLLM engines cannot share one), started once; only
one process works at a time. A first, untimed round per engine pays the first visits: vLLM loading each
adapter, and for `swaps` the peft merge of each adapter into full weights (reported on its own, `merge_s`:
a run with swaps pays one such merge per new policy step). Then `--rounds` timed rounds, the modes in a
rotated order each round (interleaved, so load on a shared machine hits every mode alike); medians over
rounds. tokens/s = generated tokens / seconds of the whole seeds generation (swaps included).

    OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/vllm_lora.py --iterations 2 --rounds 0

also runs `--iterations` iterations of a real LoRA run (the plain loop, `--preset smollm2` on the
`--model` with model.lora r=`--rank`, a snapshot every iteration) once per rollout.lora_requests value,
one after the other, and prints each stage's wall seconds per iteration (from the loop's stage callback).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODES = ("one_call", "per_ckpt", "swaps")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def build_pool(model: str, work: Path, n: int, rank: int, scale: float) -> tuple[Path, list[Path]]:
    """(θ_0, [adapter dirs]) in a LoRA run's layout; θ_0 is a link to the model."""
    import torch
    from peft import LoraConfig, get_peft_model

    from thinking_seeds.engine.models import BUILTIN_MODELS, load_model, resolve_model_path

    src = resolve_model_path(f"builtin:{model}" if model in BUILTIN_MODELS else model)  # says how to build it
    base = work / "policy" / "step_000000"
    base.parent.mkdir(parents=True)
    base.symlink_to(Path(src).resolve())
    adapters = []
    for k in range(1, n + 1):
        m, tok = load_model(base)
        pm = get_peft_model(m, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS))
        g = torch.Generator().manual_seed(k)
        with torch.no_grad():
            for name, p in pm.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * scale)
        d = work / "policy" / f"step_{k:06d}"
        pm.save_pretrained(d)
        tok.save_pretrained(d)
        adapters.append(d)
    return base, adapters


def seeds_calls(tok, adapters, prompts: int, drafts: int, max_new: int, k: int):
    """One iteration's seeds requests grouped per member, as stage_seeds builds them (seed k: its draws)."""
    from thinking_seeds.data.chain_sum import question
    from thinking_seeds.engine.models import encode_prompt
    from thinking_seeds.engine.rollout import SamplingParams

    rng = random.Random(f"bench-lora/{k}")
    qs = []
    for _ in range(prompts):
        terms = [str(rng.randint(0, 99)) for _ in range(rng.randint(2, 4))]
        qs.append(question("".join(t if i == 0 else rng.choice("+-") + t for i, t in enumerate(terms))))
    by_member: dict[int, list[str]] = {}
    for q in qs:
        for _ in range(drafts):
            by_member.setdefault(rng.randrange(len(adapters)), []).append(q)
    calls = []
    for m in sorted(by_member):
        ctx = [encode_prompt(tok, [{"role": "user", "content": q}]) for q in by_member[m]]
        calls.append((adapters[m], ctx, SamplingParams(1.0, 1.0, max_new, seed=1000 * k + m), None))
    return calls


def worker(conn, base: str, adapters: list[str], lora_requests: bool, args: dict) -> None:
    """One engine; answers ("round", k, mode) with that round's tokens and seconds."""
    import torch

    torch.set_num_threads(1)
    from thinking_seeds.config import load_config
    from thinking_seeds.engine.models import load_model
    from thinking_seeds.engine.sharding import LocalRollout, generate_sharded, generate_sharded_many
    from thinking_seeds.engine.vllm_engine import VLLMEngine

    cfg = load_config(
        "smollm2",
        [
            f"model.path={base}",
            f"model.lora.r={args['rank']}",
            f"model.lora.alpha={2.0 * args['rank']}",
            f"model.lora.target_modules=[{', '.join(TARGETS)}]",
            f"pool.size={len(adapters)}",
            f"rollout.batch_size={args['batch']}",
            f"rollout.lora_requests={'true' if lora_requests else 'false'}",
        ],
    )
    _, tok = load_model(base)
    t = time.perf_counter()
    eng = VLLMEngine(base, cfg)
    conn.send({"start_s": time.perf_counter() - t, "lora_requests": eng.lora_requests})
    paths = [Path(a) for a in adapters]
    while True:
        msg = conn.recv()
        if msg is None:
            break
        _, k, mode = msg
        calls = seeds_calls(tok, paths, args["prompts"], args["drafts"], args["max_new"], k)
        secs: dict[str, float] = {}

        def timer(name, secs=secs):
            from thinking_seeds.pipeline.session import Timer

            return Timer(secs)(name)

        merges_before = len(eng._merged)
        t = time.perf_counter()
        if mode == "per_ckpt":
            out = [generate_sharded(LocalRollout(eng), ck, c, p, m, args["batch"], timer) for ck, c, p, m in calls]
        else:  # one_call on the adapters engine; swaps on the other (generate_sharded_many loops there)
            out = generate_sharded_many(LocalRollout(eng), calls, args["batch"], timer)
        wall = time.perf_counter() - t
        conn.send(
            {
                "mode": mode,
                "k": k,
                "wall_s": wall,
                "swap_s": secs.get("weight_swap", 0.0),
                "generation_s": secs.get("generation", 0.0),
                "merged": len(eng._merged) - merges_before,
                "tokens": sum(len(g.token_ids) for gens in out for g in gens),
                "requests": sum(len(gens) for gens in out),
                "members": len(calls),
                "token_ids": [[g.token_ids for g in gens] for gens in out],
            }
        )
    eng.close()


def train_worker(out_json: str, model_dir: str, runs: str, lora_requests: bool, args: dict) -> None:
    """One short LoRA run on vLLM; writes [(k, stage, wall seconds, the stage's own seconds)] to out_json."""
    import torch

    torch.set_num_threads(1)
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    cfg = load_config(
        "smollm2",
        [
            f"model.path={model_dir}",
            f"model.lora.r={args['rank']}",
            f"model.lora.alpha={2.0 * args['rank']}",
            f"model.lora.target_modules=[{', '.join(TARGETS)}]",
            f"iterations={args['iterations']}",
            "pool.snapshot_every=1",
            f"pool.size={args['pool']}",
            "eval.prompts=4",
            "eval.samples=2",
            f"rollout.lora_requests={'true' if lora_requests else 'false'}",
        ],
    )
    out, last = [], [time.perf_counter()]

    def on_stage(k, stage, m):
        now = time.perf_counter()
        out.append((k, stage, now - last[0], dict(m.seconds)))
        last[0] = now

    train(RunDir.for_run(f"lora-requests-{lora_requests}", Path(runs)), cfg, on_stage)
    Path(out_json).write_text(json.dumps(out))


def bench_iterations(a, work: Path) -> None:
    from thinking_seeds.engine.models import BUILTIN_MODELS, resolve_model_path

    src = resolve_model_path(f"builtin:{a.model}" if a.model in BUILTIN_MODELS else a.model)
    res = {}
    for lora in (True, False):
        # A process of its own whose main module is this file (the run's verifier spawns worker processes).
        out = work / f"train-{lora}.json"
        cmd = [sys.executable, __file__, "--model", a.model, "--rank", str(a.rank), "--pool", str(a.pool)]
        cmd += ["--iterations", str(a.iterations), "--train-worker", json.dumps([str(out), str(src), str(work), lora])]
        subprocess.run(cmd, check=True)
        res[lora] = json.loads(out.read_text())
    print(f"\n{a.iterations} iterations of a LoRA run (smollm2 preset on {src.name}), wall seconds per stage:")
    names = ("snapshot", "seeds", "continuation", "verify", "update", "evaluate")
    print("  lora_requests  k   " + "  ".join(f"{n:>12s}" for n in names) + "         total")
    for lora, rows in res.items():
        for k in range(-1, a.iterations):
            by = {st: w for kk, st, w, _ in rows if kk == k}
            cells = "  ".join(f"{by[n]:12.1f}" if n in by else f"{'':12s}" for n in names)
            print(f"  {str(lora):13s} {k:2d}   {cells}  {sum(by.values()):12.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2, tiny, or a checkpoint dir")
    ap.add_argument("--pool", type=int, default=4, help="LoRA checkpoints in the pool")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--scale", type=float, default=0.02, help="std of the random lora_B entries")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per iteration (smollm2 preset: 8)")
    ap.add_argument("--drafts", type=int, default=4, help="drafts per prompt (smollm2 preset: 4 seeds per group)")
    ap.add_argument("--max-new", type=int, default=48, help="smollm2 preset: 48")
    ap.add_argument("--batch", type=int, default=64, help="rollout.batch_size (smollm2 preset: 64)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write every round here")
    ap.add_argument("--iterations", type=int, default=0, help="also time this many iterations of a LoRA run per mode")
    ap.add_argument("--train-worker", default=None, help=argparse.SUPPRESS)  # internal: one run of --iterations
    a = ap.parse_args()
    if a.train_worker:
        out, model_dir, runs, lora = json.loads(a.train_worker)
        train_worker(out, model_dir, str(Path(runs) / "runs"), lora, vars(a))
        return

    import torch
    import vllm

    load = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, load avg {load[0]:.1f}, OMP_NUM_THREADS="
        f"{os.environ['OMP_NUM_THREADS']}, torch {torch.__version__}, vllm {vllm.__version__}",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="ts-bench-lora-"))
    ctx = mp.get_context("spawn")
    procs, conns = {}, {}
    try:
        if a.iterations:
            bench_iterations(a, work)
        if not a.rounds:
            return
        t = time.perf_counter()
        base, adapters = build_pool(a.model, work, a.pool, a.rank, a.scale)
        print(f"pool: {a.pool} adapters r={a.rank} on {TARGETS} of {base.resolve()} ({time.perf_counter() - t:.1f} s)")
        args = dict(vars(a))
        for name, lora in (("adapters", True), ("swaps", False)):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker, args=(child, str(base), [str(x) for x in adapters], lora, args))
            p.start()
            procs[name], conns[name] = p, parent
            info = parent.recv()  # one engine starts at a time
            assert info["lora_requests"] == lora
            print(f"engine {name}: started in {info['start_s']:.1f} s", flush=True)

        def run(mode, k):
            c = conns["swaps" if mode == "swaps" else "adapters"]
            c.send(("round", k, mode))
            return c.recv()

        cold = {m: run(m, 0) for m in ("one_call", "swaps")}  # first visits: adapter loads, peft merges
        for m, r in cold.items():
            r.pop("token_ids")
            print(
                f"first round (not in the medians) {m:9s}: {r['wall_s']:7.2f} s, of which swaps "
                f"{r['swap_s']:.2f} s ({r['merged']} adapters merged into full weights)",
                flush=True,
            )
        first_swap_s = cold["swaps"]["swap_s"] / max(1, cold["swaps"]["merged"])
        rounds = []
        for k in range(1, a.rounds + 1):
            order = MODES[k % 3 :] + MODES[: k % 3]
            res = {m: run(m, k) for m in order}
            same = res["one_call"]["token_ids"] == res["swaps"]["token_ids"] == res["per_ckpt"]["token_ids"]
            line = "  ".join(
                f"{m} {res[m]['wall_s']:6.2f} s {res[m]['tokens'] / res[m]['wall_s']:6.1f} tok/s" for m in MODES
            )
            print(f"round {k} ({', '.join(order)}): {line}  same tokens: {same}", flush=True)
            for r in res.values():
                r.pop("token_ids")
            rounds.append({"k": k, "order": order, "same_tokens": same, **res})

        def med(mode, key):
            return statistics.median(r[mode][key] for r in rounds)

        drawn = sorted({r["one_call"]["members"] for r in rounds})
        print(
            f"\nseeds of one iteration: {a.prompts} prompts x {a.drafts} drafts = {a.prompts * a.drafts} requests, "
            f"{a.max_new} new tokens max, from a pool of {a.pool} LoRA checkpoints ({drawn} members drawn per "
            f"round); medians of {a.rounds} rounds"
        )
        summary = {}
        for m in MODES:
            tps = statistics.median(r[m]["tokens"] / r[m]["wall_s"] for r in rounds)
            summary[m] = {"s": med(m, "wall_s"), "tok_s": tps, "swap_s": med(m, "swap_s"), "tokens": med(m, "tokens")}
            print(
                f"  {m:9s} {summary[m]['s']:7.2f} s per seeds stage  {tps:7.1f} tok/s  "
                f"(swaps {summary[m]['swap_s']:.2f} s, {summary[m]['tokens']:.0f} tokens)"
            )
        ratio = statistics.median(r["swaps"]["wall_s"] / r["one_call"]["wall_s"] for r in rounds)
        ratio_pc = statistics.median(r["per_ckpt"]["wall_s"] / r["one_call"]["wall_s"] for r in rounds)
        print(f"  swaps / one_call seconds (median of per-round ratios): {ratio:.2f}x")
        print(f"  per_ckpt / one_call seconds: {ratio_pc:.2f}x")
        print(f"  swaps, first visit of an adapter (peft merge to full weights + reload): {first_swap_s:.2f} s")
        print(f"  same tokens in every mode: {sum(r['same_tokens'] for r in rounds)} of {len(rounds)} rounds")
        if a.json:
            Path(a.json).write_text(json.dumps({"args": vars(a), "cold": cold, "rounds": rounds, "summary": summary}))
    finally:
        for c in conns.values():
            try:
                c.send(None)
            except OSError:
                pass
        for p in procs.values():
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
