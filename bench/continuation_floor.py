"""Where Thinking Seeds' continuation stage spends more than our GRPO's generation, and its floor
(issue #12, goal 4), on the tiny preset with the HF engine.

    OMP_NUM_THREADS=1 python bench/continuation_floor.py [--iteration 1] [--rounds 5] [--engines ours,plain]
        [--keep DIR] [--pipeline-rounds 0]

It trains the tiny preset (Thinking Seeds, plain loop) for `--iteration`+1 iterations in a temporary
runs dir, then asks the pipeline's own continuation stage (`stage_continuation.continuation`) for
the batch of iteration k, once with the run's config and once with `algorithm=grpo` (same prompts,
same sampling seed: `stage_seed` depends on the run seed, k and the stage only), catching the
requests at `Session.generate` instead of sampling them. Both batches are then sampled by one HF
engine holding θ_k of the run, as the stage does it (one call, `max_new` = the per-row caps):

Columns: width (the longest context), cache (positions the prefill leaves in the KV cache: the
longest context, or less where contexts are fed through decode steps), context (tokens of the
contexts), prefilled (positions the prefill computed, padding included), steps (lock-step decode
steps), tokens (sampled), KV·rows/step (cached positions attention reads per step, mean), then CPU
seconds.

  grpo            the GRPO batch: 128 prompt-only contexts, cap T each
  ts              the Thinking Seeds batch: on-policy rows (prompt) and seeded rows (prompt + prefix,
                  cap T - len(prefix)), left-padded to the longest context
  ts_prompt_only  the same rows and caps, prefixes dropped: contexts as narrow as GRPO's (context length)
  ts_caps_T       the same contexts, every cap T (what the per-row caps save)
  ts_on_policy    the on-policy rows alone, in their own call
  ts_seeded       the seeded rows alone, in their own call (ts_split = the two calls together)

and this under engines (`--engines`), interleaved in the same rounds: `ours` (HFEngine as it is:
its own preallocated KV cache; prefill in groups of similar context length, identical contexts
prefilled once (`decode.unique_contexts`); the part of a long context that its short cap leaves
room for fed through the decode steps (`decode.prefill_width`)), `prefill_each` (ours, but every
row prefilled on its own: before identical contexts were shared), `prefill_all` (ours, but every
context prefilled whole: before prefixes were fed) and `plain` (transformers' DynamicCache and one
prefill of the whole left-padded batch: HFEngine before its own cache; `growing_cache` patched to
None) and `no_shed` (ours, but finished rows kept in the batch to its last step: HFEngine before it shed
them, `decode.SHED_DONE_FRACTION`). `plain` and `prefill_all` sample the same tokens, and so do `ours`,
`prefill_each` and `no_shed` (checked); where there are prefixes, the engines that feed them compute
their keys and values in decode steps (other float rounding), so their samples are other draws of the
same distribution.

Every variant samples with the stage's seed, so its samples (hence decode steps and tokens) are the
same in every round (checked). Forward hooks on the model time each call: the prefill (contexts,
one call or one per group) and the decode steps (one token per row, attention over the KV cache so
far); `other` is the rest: sampling and the engine's own bookkeeping. A least-squares line through
the decode calls of the 128-row variants, CPU time = a + b * KV width, says what a step costs and
what each cached position adds; with it the extra time of `ts` over `grpo` is split into (1) the
prefill, (2) decoding over the wider KV cache, (3) the number of decode steps, (4) the rest.
`--pipeline-rounds N` then checks the same in the pipeline itself: per engine, N rounds of a 5-iteration
plain-loop run of each method (in process, overlap on), timing every `HFEngine.generate` call of
the continuation stage (iterations 0..4, 5 per run), its wall and its thread's CPU time.
Rounds are interleaved (every engine and variant once per round, the order turned each round);
figures are medians over rounds of CPU time (`time.process_time`, steadier on a shared machine than
wall time, also shown), ratios the median of per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

# checkpoint.every=1: the stage of iteration k samples with θ_k, which must be on disk for the engine to load
OVERRIDES = ["eval.prompts=1", "eval.samples=1", "eval.seeded=false", "checkpoint.every=1"]


class _Captured(Exception):
    pass


def stage_batch(run, cfg, k: int) -> dict:
    """The requests the continuation stage of iteration k sends to the engine under `cfg`."""
    from thinking_seeds.pipeline.session import Session
    from thinking_seeds.pipeline.stage_continuation import continuation

    s = Session(run, cfg)
    got: dict = {}

    def record(checkpoint, contexts, params, max_new=None, timer=None):
        got.update(checkpoint=checkpoint, contexts=[list(c) for c in contexts], params=params, max_new=list(max_new))
        raise _Captured

    s.generate = record
    try:
        continuation(s, k)
    except _Captured:
        return got
    raise RuntimeError("the continuation stage did not generate")


ENGINE_MODES = ("ours", "plain", "prefill_all", "prefill_each", "no_shed")


@contextmanager
def engine_mode(mode: str):
    """`plain`: transformers' own DynamicCache and one padded prefill (HFEngine before its own cache);
    `prefill_all`: our cache, but every context prefilled whole (HFEngine before prefixes were fed
    through the decode steps, `decode.prefill_width`); `prefill_each`: ours, but every row prefilled
    on its own (before identical contexts were prefilled once, `decode.unique_contexts`)."""
    import thinking_seeds.engine.decode as decode

    if mode not in ENGINE_MODES:
        raise SystemExit(f"unknown engine {mode!r}: choose from {', '.join(ENGINE_MODES)}")
    kept = decode.growing_cache, decode.prefill_width, decode.unique_contexts, decode.SHED_DONE_FRACTION
    if mode == "plain":
        decode.growing_cache = lambda *a: None
    if mode == "no_shed":
        decode.SHED_DONE_FRACTION = 2.0
    if mode in ("plain", "prefill_all"):
        decode.prefill_width = lambda lengths, limits: max(lengths)
    if mode == "prefill_each":
        decode.unique_contexts = lambda contexts: (list(contexts), [[i] for i in range(len(contexts))])
    try:
        yield
    finally:
        decode.growing_cache, decode.prefill_width, decode.unique_contexts, decode.SHED_DONE_FRACTION = kept


class CallClock:
    """Wall and CPU seconds of every forward call of the model: (query width, KV width, rows, wall, cpu)."""

    def __init__(self, model):
        self.calls: list[tuple[int, int, int, float, float]] = []
        self._t0 = (0.0, 0.0)
        model.register_forward_pre_hook(self._pre, with_kwargs=True)
        model.register_forward_hook(self._post, with_kwargs=True)

    def _pre(self, module, args, kwargs):
        self._t0 = (time.perf_counter(), time.process_time())

    def _post(self, module, args, kwargs, out):
        wall, cpu = time.perf_counter() - self._t0[0], time.process_time() - self._t0[1]
        ids, attn = kwargs["input_ids"], kwargs["attention_mask"]
        self.calls.append((ids.shape[1], attn.shape[1], ids.shape[0], wall, cpu))


def timed(engine, clock: CallClock, mode: str, contexts, caps, params) -> dict:
    with engine_mode(mode):
        clock.calls.clear()
        w0, c0 = time.perf_counter(), time.process_time()
        gens = engine.generate(contexts, params, caps)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    calls = list(clock.calls)
    prefill = [c for c in calls if c[0] > 1]
    decode = [c for c in calls if c[0] == 1]
    return {
        "gens": gens,
        "wall": wall,
        "cpu": cpu,
        "prefill": sum(c[4] for c in prefill),
        "prefill_positions": sum(c[0] * c[2] for c in prefill),
        "decode": sum(c[4] for c in decode),
        "other": cpu - sum(c[4] for c in calls),  # sampling, masks, the engine's bookkeeping
        "decode_calls": decode,
    }


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def report(mode: str, res: dict, variants: dict, n_rows: int, rounds: int) -> dict:
    """The table and the split of ts - grpo for one engine; its per-variant medians."""
    med = statistics.median
    gen = {v: rs[0]["gens"] for v, rs in res.items()}
    print(f"\nengine {mode}: CPU seconds (wall: wall seconds), medians of {rounds} rounds")
    print(
        f"{'variant':15} {'rows':>4} {'width':>5} {'cache':>5} {'context':>7} {'prefilled':>9} {'steps':>5} "
        f"{'tokens':>6} {'KV·rows/step':>12} "
        f"{'prefill':>7} {'decode':>7} {'other':>6} {'cpu':>6} {'wall':>6} {'ms/step':>7} {'cpu vs grpo':>11}"
    )
    stats = {}
    for v, rs in res.items():
        ctx = variants[v][0]
        width = max(len(c) for c in ctx)
        tokens = sum(len(g.token_ids) for g in gen[v])
        dec = rs[0]["decode_calls"]
        steps = len(dec) + 1  # lock-step decode calls + the first sample (from the prefill's logits)
        cache = min(c[1] for c in dec) - 1 if dec else width  # what the prefill left in the KV cache
        kv = statistics.mean(c[1] for c in dec) if dec else 0.0
        row = {key: med(x[key] for x in rs) for key in ("prefill", "decode", "other", "cpu", "wall")}
        ratio = med(x["cpu"] / g["cpu"] for x, g in zip(rs, res["grpo"], strict=True))
        stats[v] = dict(row, width=width, cache=cache, steps=steps, tokens=tokens, kv=kv, rows=len(ctx), ratio=ratio)
        print(
            f"{v:15} {len(ctx):4d} {width:5d} {cache:5d} {sum(len(c) for c in ctx):7d} {rs[0]['prefill_positions']:9d} "
            f"{steps:5d} {tokens:6d} "
            f"{len(ctx) * kv:12.0f} {row['prefill']:7.3f} {row['decode']:7.3f} {row['other']:6.3f} {row['cpu']:6.3f} "
            f"{row['wall']:6.3f} {1000 * row['cpu'] / steps:7.2f} {ratio:10.3f}x"
        )
    split = [x["cpu"] + y["cpu"] for x, y in zip(res["ts_on_policy"], res["ts_seeded"], strict=True)]
    split_ratio = med(s / g["cpu"] for s, g in zip(split, res["grpo"], strict=True))
    stats["ts_split"] = {"cpu": med(split), "ratio": split_ratio}
    label = "(two calls: ts_on_policy + ts_seeded)"
    print(f"{'ts_split':15} {label:>89} {med(split):6.3f} {'':14} {split_ratio:10.3f}x")

    pts = [
        (c[1], c[4])
        for v in ("grpo", "ts", "ts_prompt_only", "ts_caps_T")
        for x in res[v]
        for c in x["decode_calls"]
        if c[2] == n_rows
    ]
    a0, b0 = fit_line(pts)
    g, t = stats["grpo"], stats["ts"]
    print(
        f"one decode step of {n_rows} rows: {1000 * a0:.2f} ms + {1000 * b0:.4f} ms per cached position "
        f"(least squares over {len(pts)} calls, KV width {min(p[0] for p in pts)}-{max(p[0] for p in pts)})"
    )
    d_total = t["cpu"] - g["cpu"]
    d_prefill = t["prefill"] - g["prefill"]
    d_kv = (t["steps"] - 1) * b0 * (t["cache"] - g["cache"])  # ts's steps, each over a wider cache
    per_step = (g["decode"] + g["other"]) / max(g["steps"] - 1, 1)  # grpo's cost of one more step
    d_steps = (t["steps"] - g["steps"]) * per_step
    print(f"ts - grpo: {d_total:+.3f} s ({t['cpu'] / g['cpu']:.3f}x), of which")
    pos_t, pos_g = res["ts"][0]["prefill_positions"], res["grpo"][0]["prefill_positions"]
    print(f"  prefill ({pos_t} vs {pos_g} positions) {d_prefill:+.3f} s")
    print(
        f"  decoding over a cache {t['cache'] - g['cache']} positions wider ({t['steps'] - 1} steps x "
        f"{1000 * b0:.4f} ms x {t['cache'] - g['cache']}) {d_kv:+.3f} s"
    )
    print(
        f"  decode steps {t['steps']} vs {g['steps']} ({t['steps'] - g['steps']:+d} x {1000 * per_step:.2f} ms) "
        f"{d_steps:+.3f} s"
    )
    print(f"  the rest (sampling, bookkeeping, noise) {d_total - d_prefill - d_kv - d_steps:+.3f} s")
    print(
        f"  measured: context length alone (ts - ts_prompt_only, same rows and caps) "
        f"{t['cpu'] - stats['ts_prompt_only']['cpu']:+.3f} s; per-row caps save (ts_caps_T - ts) "
        f"{stats['ts_caps_T']['cpu'] - t['cpu']:+.3f} s"
    )
    return stats


def pipeline_check(modes: list[str], rounds: int, base: Path) -> list[str]:
    """The continuation stage's engine calls in real runs (plain loop), per engine and method."""
    import inspect

    import thinking_seeds.engine.rollout as rollout
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    calls: dict[tuple[str, str], list[tuple[float, float]]] = {}
    method = ""
    generate = rollout.HFEngine.generate

    def timed_generate(self, contexts, params, max_new=None):
        w0, c0 = time.perf_counter(), time.thread_time()
        out = generate(self, contexts, params, max_new)
        if any(f.function == "continuation" for f in inspect.stack()):
            calls.setdefault((mode, method), []).append((time.perf_counter() - w0, time.thread_time() - c0))
        return out

    rollout.HFEngine.generate = timed_generate
    try:
        for r in range(rounds):
            for mode in modes:
                for method in ("grpo", "thinking_seeds"):
                    with engine_mode(mode):
                        cfg = load_config("tiny", [f"algorithm={method}", "iterations=5", "eval.every=6", *OVERRIDES])
                        train(RunDir.for_run(f"pipe-{mode}-{method}-{r}", base), cfg)
    finally:
        rollout.HFEngine.generate = generate
    med = statistics.median
    lines = [f"\nin the pipeline: the continuation stage's engine call, median of {rounds} x 5 iterations (plain loop)"]
    for mode in modes:
        g, t = calls[(mode, "grpo")], calls[(mode, "thinking_seeds")]
        gc, tc = med(c for _, c in g), med(c for _, c in t)
        gm, tm = min(c for _, c in g), min(c for _, c in t)
        lines.append(
            f"  {mode:6} grpo {gc:.3f} s CPU (min {gm:.3f}, wall {med(w for w, _ in g):.3f}), thinking_seeds "
            f"{tc:.3f} s CPU (min {tm:.3f}, wall {med(w for w, _ in t):.3f}): ts/grpo {tc / gc:.3f}x CPU, "
            f"+{tc - gc:.3f} s (of the minima {tm / gm:.3f}x)"
        )
        lines.append(f"         CPU per call, grpo: {' '.join(f'{c:.2f}' for _, c in g)}")
        lines.append(f"         thinking_seeds:     {' '.join(f'{c:.2f}' for _, c in t)}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iteration", type=int, default=1, help="whose batch (bench/iteration.py times iterations 1..)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--engines",
        default="ours,prefill_all",
        help="ours (HFEngine as it is), plain (transformers' cache, whole prefill), prefill_all (ours, whole prefill)",
    )
    ap.add_argument("--pipeline-rounds", type=int, default=0, help="then time the stage in real runs (see above)")
    ap.add_argument("--keep", type=Path, default=None, help="train into (and reuse) this runs dir, not a temporary one")
    a = ap.parse_args()

    import torch

    from thinking_seeds.config import load_config
    from thinking_seeds.engine.sharding import build_engine
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.pipeline.rows import RolloutRow, read_rows
    from thinking_seeds.store.run_dir import RunDir

    k, modes = a.iteration, a.engines.split(",")
    load0 = os.getloadavg()
    base = a.keep or Path(tempfile.mkdtemp(prefix="ts-bench-floor-"))
    try:
        ts_cfg = load_config("tiny", [f"iterations={k + 1}", f"eval.every={k + 2}", *OVERRIDES])
        grpo_cfg = load_config("tiny", ["algorithm=grpo", f"iterations={k + 1}", f"eval.every={k + 2}", *OVERRIDES])
        run = RunDir.for_run("floor-ts", base)
        if not run.generated(k).exists():
            t0 = time.perf_counter()
            train(run, ts_cfg)
            print(f"trained {k + 1} iterations of the tiny preset in {time.perf_counter() - t0:.0f} s", flush=True)
        stage_rows = read_rows(RolloutRow, run.generated(k))
        ts, grpo = stage_batch(run, ts_cfg, k), stage_batch(run, grpo_cfg, k)
        if ts["params"] != grpo["params"] or len(ts["contexts"]) != len(grpo["contexts"]):
            raise RuntimeError("the two batches differ in sampling params or size; pick another --iteration")
        T = ts["params"].max_new_tokens
        prompt, pre = [], []
        for c, g in zip(ts["contexts"], grpo["contexts"], strict=True):
            if c[: len(g)] != g:
                raise RuntimeError("request order differs between the two stages")
            prompt.append(g)
            pre.append(len(c) - len(g))
        on = [i for i, p in enumerate(pre) if p == 0]
        sd = [i for i, p in enumerate(pre) if p > 0]
        variants = {
            "grpo": (grpo["contexts"], grpo["max_new"]),
            "ts": (ts["contexts"], ts["max_new"]),
            "ts_prompt_only": (prompt, ts["max_new"]),
            "ts_caps_T": (ts["contexts"], [T] * len(pre)),
            "ts_on_policy": ([ts["contexts"][i] for i in on], [ts["max_new"][i] for i in on]),
            "ts_seeded": ([ts["contexts"][i] for i in sd], [ts["max_new"][i] for i in sd]),
        }

        engine = build_engine(run.policy(0), ts_cfg)
        engine.load_weights(ts["checkpoint"])
        clock = CallClock(engine.model)
        params = ts["params"]
        res = {m: {v: [] for v in variants} for m in modes}
        jobs = [(m, v) for m in modes for v in variants]
        for m, v in jobs:  # warm-up, untimed
            timed(engine, clock, m, *variants[v], params)
        for r in range(a.rounds):
            for m, v in jobs[r % len(jobs) :] + jobs[: r % len(jobs)]:
                res[m][v].append(timed(engine, clock, m, *variants[v], params))
        pipeline = pipeline_check(modes, a.pipeline_rounds, base) if a.pipeline_rounds else []
        load1 = os.getloadavg()
    finally:
        if a.keep is None:
            shutil.rmtree(base, ignore_errors=True)

    # Samples are fixed by the seed: the same in every round (checked); `plain` and `prefill_all`
    # compute what one padded prefill computes, so they sample the same tokens (checked); `ours`
    # feeds prefixes through decode steps: other float rounding, so other samples where prefixes are.
    first = res[modes[0]]
    for m in modes:
        for v, rs in res[m].items():
            if any([g.token_ids for g in x["gens"]] != [g.token_ids for g in rs[0]["gens"]] for x in rs):
                raise RuntimeError(f"{m}/{v}: samples differ between rounds")
    for kind in (("plain", "prefill_all"), ("ours", "prefill_each", "no_shed")):  # whole prefills; prefixes fed
        same_kind = [m for m in modes if m in kind]
        for m in same_kind[1:]:
            for v in variants:
                got, ref = res[m][v][0]["gens"], res[same_kind[0]][v][0]["gens"]
                if [g.token_ids for g in got] != [g.token_ids for g in ref]:
                    raise RuntimeError(f"{m}/{v}: samples differ from {same_kind[0]}'s")
    same = {
        v: all([g.token_ids for g in res[m][v][0]["gens"]] == [g.token_ids for g in first[v][0]["gens"]] for m in modes)
        for v in variants
    }
    same_logp = all(
        [g.logprobs for g in res[m][v][0]["gens"]] == [g.logprobs for g in first[v][0]["gens"]]
        for m in modes
        for v in variants
    )
    gen = {v: rs[0]["gens"] for v, rs in first.items()}
    from_stage = [r.token_ids[r.prefix_len :] for r in stage_rows if r.kind != "offpolicy_full"]
    same_on = sum(gen["ts"][i].token_ids == gen["grpo"][i].token_ids for i in on)

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"torch {torch.__version__}, torch threads {torch.get_num_threads()}, load average "
        f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end"
    )
    pl, pr = [len(p) for p in prompt], [pre[i] for i in sd]
    print(
        f"iteration {k} of a tiny-preset run, θ_{k}, T = {T}: {len(pre)} requests, {len(on)} on-policy (prompt "
        f"{min(pl)}-{max(pl)} tokens), {len(sd)} seeded (prefix {min(pr)}-{max(pr)}, mean {statistics.mean(pr):.1f})"
    )
    print(
        f"ts reproduces the stage's own samples: {[g.token_ids for g in gen['ts']] == from_stage}; its on-policy "
        f"rows sample the tokens grpo's rows of the same slots sample: {same_on}/{len(on)}; engines "
        f"{' and '.join(modes)} sample the same tokens in: {', '.join(v for v, x in same.items() if x) or 'none'}"
        f" (others differ: {', '.join(v for v, x in same.items() if not x) or 'none'}), the same log-probs bit "
        f"for bit: {same_logp}"
    )
    stats = {m: report(m, res[m], variants, len(pre), a.rounds) for m in modes}
    if len(modes) == 2:
        m0, m1 = modes
        print(f"\n{m0} / {m1}, CPU, median of per-round ratios:")
        for v in variants:
            r = statistics.median(x["cpu"] / y["cpu"] for x, y in zip(res[m0][v], res[m1][v], strict=True))
            print(f"  {v:15} {stats[m0][v]['cpu']:6.3f} / {stats[m1][v]['cpu']:6.3f} s = {r:.3f}x")
        for m in modes:
            extra = stats[m]["ts"]["cpu"] - stats[m]["grpo"]["cpu"]
            print(f"ts/grpo with {m}: {stats[m]['ts']['ratio']:.3f}x, +{extra:.3f} s")
    tok = {
        v: (
            sum(len(c) + len(x.token_ids) for c, x in zip(variants[v][0], gen[v], strict=True)),
            max(len(c) + len(x.token_ids) for c, x in zip(variants[v][0], gen[v], strict=True)),
        )
        for v in ("grpo", "ts")
    }
    print(
        "what the update then trains (prompt + response tokens, longest sequence): "
        + ", ".join(f"{v} {n} tokens, longest {w}" for v, (n, w) in tok.items())
    )
    for line in pipeline:
        print(line)


if __name__ == "__main__":  # the verifier's spawned workers import __main__
    main()
