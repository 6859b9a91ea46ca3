"""What the vLLM engine is started with (engine/vllm_args.py), for CPU and CUDA settings, without vLLM:
its length from the longest prompt + max_new_tokens (refused past the model's limit), its GPUs, its memory
share (a GPU of its own, or shared with the trainer), its dtype and CUDA graphs."""

from __future__ import annotations

import pytest

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.engine.vllm_args import GIB, GpuMemory, ModelInfo, model_info, vllm_engine_args

# A Qwen2.5-7B-shaped model: 28 layers, 4 KV heads of 128, vocabulary 152,064, 32k positions.
QWEN7B = ModelInfo(
    max_positions=32768,
    layers=28,
    kv_heads=4,
    head_dim=128,
    hidden=3584,
    intermediate=18944,
    vocab=152064,
    params=7_615_616_512,
)
H100 = 80 * GIB


def cfg(*sets: str):
    return load_config("tiny", ["rollout.engine=vllm", *sets])


def test_length_is_the_longest_prompt_plus_the_budget_and_refused_past_the_model():
    c = cfg("rollout.max_new_tokens=4096")
    args = vllm_engine_args(c, QWEN7B, "cpu", longest_prompt=300)
    assert args.max_model_len == args.kwargs["max_model_len"] == 4396
    assert args.kwargs["max_num_batched_tokens"] >= 4396  # no partial prefill of the longest prompt
    # An explicit rollout.max_model_len wins; without the run's prompts: min(model limit, 2048).
    assert vllm_engine_args(cfg("rollout.max_model_len=6000"), QWEN7B, "cpu", longest_prompt=300).max_model_len == 6000
    assert vllm_engine_args(c, QWEN7B, "cpu").max_model_len == 2048
    with pytest.raises(ConfigError) as e:
        vllm_engine_args(cfg("rollout.max_new_tokens=32700"), QWEN7B, "cpu", longest_prompt=300)
    msg = str(e.value)
    assert "\n" not in msg and "33000" in msg and "max_position_embeddings=32768" in msg
    assert "rollout.max_new_tokens" in msg


def test_cpu_engine_is_eager_with_an_explicit_kv_cache():
    args = vllm_engine_args(cfg(), QWEN7B, "cpu", longest_prompt=100)
    kw = args.kwargs
    assert kw["enforce_eager"] is True and kw["block_size"] == 32 and kw["dtype"] == "float32"
    assert GIB // 4 <= kw["kv_cache_memory_bytes"] <= 4 * GIB
    assert "gpu_memory_utilization" not in kw and "device_ids" not in kw
    # The KV cache always holds one whole sequence, even past the 4 GiB cap.
    long = vllm_engine_args(cfg("rollout.max_new_tokens=32000"), QWEN7B, "cpu", longest_prompt=700)
    assert long.kwargs["kv_cache_memory_bytes"] >= QWEN7B.kv_bytes_per_token("float32") * 32700
    assert vllm_engine_args(cfg(), QWEN7B, "cpu", env={"TS_VLLM_EAGER": "0"}).kwargs["enforce_eager"] is False


def test_cuda_engine_on_its_own_gpu_takes_ninety_percent_of_what_is_free():
    gpu = GpuMemory(free=60 * GIB, total=H100)  # another process holds 20 GiB
    args = vllm_engine_args(cfg(), QWEN7B, "cuda", longest_prompt=100, gpu=gpu, gpu_ids=(1,))
    kw = args.kwargs
    assert kw["enforce_eager"] is False  # CUDA graphs
    assert kw["device_ids"] == [1]
    assert "block_size" not in kw and "kv_cache_memory_bytes" not in kw  # vLLM sizes the KV cache
    assert kw["gpu_memory_utilization"] * H100 <= 0.9 * gpu.free  # vLLM refuses more than is free
    assert kw["gpu_memory_utilization"] == pytest.approx(0.9 * 60 / 80, abs=1e-4)


def test_cuda_engine_sharing_the_trainers_gpu_takes_weights_kv_and_margin():
    c = cfg("update.mixed_precision=bf16", "rollout.batch_size=64", "rollout.max_new_tokens=1024")
    gpu = GpuMemory(free=H100 - GIB, total=H100)
    args = vllm_engine_args(c, QWEN7B, "cuda", longest_prompt=200, gpu=gpu, gpu_ids=(0,), shared_gpu=True)
    kw, n = args.kwargs, args.notes
    assert kw["dtype"] == "bfloat16" and args.shared_gpu
    assert n["weights"] == QWEN7B.params * 2
    assert n["kv_cache"] == 64 * 1224 * 2 * 28 * 4 * 128 * 2  # the whole batch at full length
    need = n["weights"] + n["kv_cache"] + n["margin"]
    assert need <= kw["gpu_memory_utilization"] * H100 < need + H100 * 2e-4
    assert kw["gpu_memory_utilization"] < 0.5  # the trainer keeps the rest of the GPU
    # Too little free on the shared GPU: one line, naming what to change.
    with pytest.raises(ConfigError) as e:
        vllm_engine_args(c, QWEN7B, "cuda", longest_prompt=200, gpu=GpuMemory(10 * GIB, H100), shared_gpu=True)
    msg = str(e.value)
    assert "\n" not in msg and "rollout.batch_size" in msg and "rollout.gpu_ids" in msg
    # An explicit share is taken as given.
    own = vllm_engine_args(cfg("rollout.gpu_memory_utilization=0.3"), QWEN7B, "cuda", longest_prompt=10)
    assert own.kwargs["gpu_memory_utilization"] == 0.3


def test_cuda_dtype_is_bf16_where_the_trainer_recomputes_old_logprobs():
    gpu = GpuMemory(free=H100, total=H100)
    fp32 = cfg()  # the engine's log-probs are π_old: sampled in the trainer's float32
    assert not fp32.update.recompute_old_logprobs
    assert vllm_engine_args(fp32, QWEN7B, "cuda", gpu=gpu).kwargs["dtype"] == "float32"
    recompute = cfg("update.recompute_old_logprobs=true")
    assert vllm_engine_args(recompute, QWEN7B, "cuda", gpu=gpu).kwargs["dtype"] == "bfloat16"
    assert vllm_engine_args(recompute, QWEN7B, "cpu").kwargs["dtype"] == "float32"  # the CPU keeps the config's


def test_tensor_parallel_engine_splits_its_weights_and_names_its_gpus():
    c = cfg("rollout.tensor_parallel_size=2")
    gpu = GpuMemory(free=H100, total=H100)
    kw = vllm_engine_args(c, QWEN7B, "cuda", gpu=gpu, gpu_ids=(2, 3), shared_gpu=True).kwargs
    assert kw["tensor_parallel_size"] == 2 and kw["device_ids"] == [2, 3]
    one = vllm_engine_args(cfg(), QWEN7B, "cuda", gpu=gpu, gpu_ids=(2,), shared_gpu=True).kwargs
    assert kw["gpu_memory_utilization"] < one["gpu_memory_utilization"]


def test_model_info_reads_config_and_weight_headers(tmp_path):
    tok = char_tokenizer("0123456789+-=")
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)
    model.save_pretrained(tmp_path)
    info = model_info(tmp_path)
    assert info.params == sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    assert (info.layers, info.kv_heads, info.head_dim, info.max_positions) == (2, 2, 16, 256)
    assert info.vocab == len(tok)


def test_the_session_sizes_vllm_from_the_runs_longest_prompt(verified_run):
    """What the driver's engine (and each Ray worker's) is built with: the longest prompt of the run's three
    splits, encoded as the stages encode them; with rollout.max_new_tokens that is the engine's length."""
    from thinking_seeds.engine.models import encode_prompt
    from thinking_seeds.pipeline.session import Session

    run, c = verified_run
    s = Session(run, c)
    lengths = [
        len(encode_prompt(s.tokenizer, p.chat())) for split in ("train", "validation", "test") for p in s.prompts(split)
    ]
    assert s.longest_prompt() == max(lengths) and min(lengths) < max(lengths)
    info = model_info(run.policy(0))
    args = vllm_engine_args(c, info, "cpu", longest_prompt=s.longest_prompt())
    assert args.max_model_len == max(lengths) + c.rollout.max_new_tokens <= info.max_positions
