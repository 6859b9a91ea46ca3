"""θ from the trainer to vLLM in memory (issue #25 item 1): no per-iteration policy file for the engine.

`VLLMEngine.load_weights` finds a policy the trainer published (transports/live_weights.py) and feeds its
tensors to vLLM's in-place `reload_weights(weights_iterator=...)`, the reload it uses for files. Runs
only in the vLLM environment (`make test-vllm`); skipped without vLLM.
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
from thinking_seeds.engine.vllm_engine import VLLMEngine  # noqa: E402
from thinking_seeds.transports import live_weights  # noqa: E402


def test_weights_from_memory_sample_as_their_file(tmp_path):
    """θ_b published in memory under a path with no file gives exactly θ_b's file samples and log-probs
    (lm_head included), and a second policy id under the same path is loaded again, not skipped."""
    a_dir, b_dir = save_tiny(tmp_path / "a", 0), save_tiny(tmp_path / "b", 1)
    model_b, tok = load_model(b_dir)
    ctx = [tok(q, add_special_tokens=False)["input_ids"] for q in ("Compute 1+2.\n", "Compute 38-57+10.\n")] * 3
    p = SamplingParams(temperature=1.0, max_new_tokens=20, seed=4)
    engine = VLLMEngine(a_dir, load_config("tiny", []))
    try:
        base = engine.generate(ctx, p)
        engine.load_weights(b_dir)
        from_file = engine.generate(ctx, p)
        engine.load_weights(a_dir)
        live = tmp_path / "run" / "policy" / "step_000007"
        live_weights.publish(live, "id-b", {k: v.detach().clone() for k, v in model_b.state_dict().items()})
        engine.load_weights(live)
        from_memory = engine.generate(ctx, p)
        assert not live.exists()  # nothing was written for the engine
        assert [g.token_ids for g in from_memory] == [g.token_ids for g in from_file]
        assert [g.token_ids for g in from_memory] != [g.token_ids for g in base]
        pairs = zip(from_file, from_memory, strict=True)
        worst = max(abs(x - y) for f, m in pairs for x, y in zip(f.logprobs, m.logprobs, strict=True))
        assert worst <= 1e-6
        model_a, _ = load_model(a_dir)
        live_weights.publish(live, "id-a", {k: v.detach().clone() for k, v in model_a.state_dict().items()})
        engine.load_weights(live)  # same path, another policy: reloaded
        assert [g.token_ids for g in engine.generate(ctx, p)] == [g.token_ids for g in base]
    finally:
        live_weights.clear()
        engine.close()


def test_a_vllm_run_in_memory_is_the_run_through_files(tmp_path):
    """A Thinking Seeds run on vLLM with the persistent trainer (θ_1, θ_2 only in memory: no snapshot and
    no checkpoint due) writes the same prefixes, rollouts and final weights as the same run with a fresh
    `accelerate launch` per update, which hands every θ_k over as a file."""
    from safetensors.torch import load_file

    from tests.helpers.tiny import MOVING  # rewards are ~0 on a random model: the entropy bonus moves it
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.parquet_io import read_table
    from thinking_seeds.store.run_dir import RunDir

    base = save_tiny(tmp_path / "base", 3)
    runs = {}
    for launcher in ("accelerate", "accelerate_per_update"):
        extra = ("iterations=3", "eval.every=3", "pool.snapshot_every=100", f"update.launcher={launcher}", *MOVING)
        cfg = load_config("tiny", small_run(base, *extra))
        runs[launcher] = train(RunDir.for_run("vllm-mem", tmp_path / launcher), cfg)
    mem, files = runs["accelerate"], runs["accelerate_per_update"]
    for k in (1, 2):
        assert not mem.policy(k).exists(), f"θ_{k} was written although no checkpoint is due"
        assert files.policy(k).exists()
    for k in range(3):
        for path in ("prefixes", "rollouts"):
            got, want = read_table(getattr(mem, path)(k)), read_table(getattr(files, path)(k))
            assert got.equals(want), f"{path} of iteration {k} differ between memory and files"
    w_mem = load_file(str(mem.policy(3) / "model.safetensors"))
    w_files = load_file(str(files.policy(3) / "model.safetensors"))
    w0 = load_file(str(files.policy(0) / "model.safetensors"))
    assert all(torch.equal(w_mem[k], w_files[k]) for k in w_files)
    assert any(not torch.equal(w0[k], w_files[k]) for k in w0), "weights never moved: the check would be vacuous"
