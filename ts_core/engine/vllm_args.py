"""What the vLLM engine is started with, as a pure function of the run config, the model and the device:
`vllm_engine_args(cfg, model, device)` -> `VLLMArgs` (the `vllm.LLM(...)` keywords and why). No vLLM
import here, so the CPU test suite asserts the length, device, memory, dtype and eager settings of CPU
and CUDA engines without vLLM installed (tests/unit/test_vllm_args.py); `VLLMEngine` passes them on.

Length: `max_model_len` is the longest prompt of the run's data plus rollout.max_new_tokens (a seed is
part of the response's budget, so a continuation's context + cap never exceeds that), or
rollout.max_model_len; a length the model's max_position_embeddings cannot hold is refused in one line.
A request past it is refused too (`rollout.refuse_overlong`), never cut.

CPU (vLLM's CPU backend, what the repository tests): eager (no torch.compile warm-up), the engine's
dtype as configured, an explicit KV cache of the batch's tokens between 0.25 and 4 GiB, 32-token blocks.

CUDA: CUDA graphs (enforce_eager=False), the GPUs of the placement (`device_ids`: indices among the
visible GPUs, vLLM's own argument, which vLLM 0.32 maps through CUDA_VISIBLE_DEVICES itself
(EngineArgs._resolve_device_ids), so the process's CUDA_VISIBLE_DEVICES is left alone: checked against the
installed vLLM's source by tests/integration/test_vllm_gpu_api.py), and memory:
- a GPU of its own: gpu_memory_utilization = 90% of the memory free at start (vLLM refuses a share above
  what is free, e.g. when a resumed run's trainer already holds memory) and the KV cache takes what the
  weights leave (vLLM's profile);
- a GPU shared with a trainer process: weights + the KV cache of rollout.batch_size sequences of
  max_model_len tokens + a margin for activations, logits and CUDA graphs, so the trainer keeps the rest;
  refused in one line when that is more than is free.
- bf16 whenever the trainer recomputes π_old (update.recompute_old_logprobs: on under bf16 anywhere or
  loss.rollout_correction), where the engine's rounding never enters the ratio; otherwise the engine's
  log-probs are π_old itself and it samples in the trainer's dtype (float32), as on the CPU.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from thinking_seeds.config import ConfigError

GIB = 1 << 30
CPU_BLOCK_SIZE = 32  # see vllm_engine.py: the CPU kernels' preferred multiple, and prompts share blocks
FALLBACK_MAX_LEN = 2048  # an engine built without the run's prompts (tests, tools): min(model limit, this)
FREE_SHARE = 0.9  # a GPU of its own: vLLM takes this share of what is free when it starts
MARGIN_BYTES = GIB // 2  # CUDA graphs' pool, the allocator's fragmentation, NCCL buffers: measured on none yet
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8}


@dataclass(frozen=True)
class ModelInfo:
    """What the engine's arguments depend on, from config.json and the weight files' headers."""

    max_positions: int | None  # max_position_embeddings (None: the config does not say)
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    params: int  # parameters in the weight files (tied embeddings once)

    def kv_bytes_per_token(self, dtype: str) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * _DTYPE_BYTES[dtype]

    def weight_bytes(self, dtype: str) -> int:
        return self.params * _DTYPE_BYTES[dtype]


def _safetensors_params(path: Path) -> int:
    """Parameters in one .safetensors file, from its header alone (no tensor is read)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    total = 0
    for name, meta in header.items():
        if name != "__metadata__":
            count = 1
            for d in meta["shape"]:
                count *= d
            total += count
    return total


def model_info(checkpoint: Path, config: Mapping | None = None) -> ModelInfo:
    """`ModelInfo` of a Hugging Face checkpoint directory (the optimizer state's file is not the model)."""
    checkpoint = Path(checkpoint)
    c = dict(config) if config is not None else json.loads((checkpoint / "config.json").read_text())
    c = {**c.get("text_config", {}), **c}
    heads = int(c.get("num_attention_heads") or 1)
    hidden = int(c.get("hidden_size") or 64)
    files = [f for f in sorted(checkpoint.glob("*.safetensors")) if f.name != "optimizer.safetensors"]
    return ModelInfo(
        max_positions=int(c["max_position_embeddings"]) if c.get("max_position_embeddings") else None,
        layers=int(c.get("num_hidden_layers") or 1),
        kv_heads=int(c.get("num_key_value_heads") or heads),
        head_dim=int(c.get("head_dim") or hidden // heads),
        hidden=hidden,
        intermediate=int(c.get("intermediate_size") or 4 * hidden),
        vocab=int(c.get("vocab_size") or 0),
        params=sum(_safetensors_params(f) for f in files),
    )


@dataclass(frozen=True)
class GpuMemory:
    """The engine's (first) GPU when it starts: bytes free and in all (torch.cuda.mem_get_info)."""

    free: int
    total: int


@dataclass(frozen=True)
class VLLMArgs:
    """The keywords of `vllm.LLM(...)` that depend on the run and the device, and the numbers behind them."""

    kwargs: dict
    max_model_len: int
    device_kind: str  # cpu | cuda
    shared_gpu: bool = False
    notes: dict = field(default_factory=dict)  # the estimate behind the memory setting (bytes)


def required_length(cfg, longest_prompt: int | None, model: ModelInfo) -> int:
    """The engine's max_model_len: rollout.max_model_len, else the longest prompt + rollout.max_new_tokens;
    without the run's prompts, min(model limit, 2048). Refused when the model cannot hold it."""
    r = cfg.rollout
    limit = model.max_positions
    if r.max_model_len is not None:
        need, why = r.max_model_len, f"rollout.max_model_len={r.max_model_len}"
    elif longest_prompt is not None:
        need = longest_prompt + r.max_new_tokens
        why = f"the longest prompt ({longest_prompt} tokens) + rollout.max_new_tokens={r.max_new_tokens}"
    else:
        return min(limit or FALLBACK_MAX_LEN, FALLBACK_MAX_LEN)
    if limit is not None and need > limit:
        raise ConfigError(
            f"{why} = {need} tokens, more than the model's max_position_embeddings={limit}: lower "
            "rollout.max_new_tokens (or rollout.max_model_len), or use shorter prompts"
        )
    return need


def vllm_dtype(cfg, device_kind: str) -> str:
    """The engine's dtype: the configured engine dtype on the CPU; on CUDA bf16 whenever the trainer
    recomputes π_old (the engine's rounding never enters the ratio there), else the trainer's dtype."""
    dtype = cfg.engine_dtype
    if device_kind == "cuda" and dtype == "float32" and cfg.update.recompute_old_logprobs:
        return "bfloat16"
    return dtype


def cpu_kv_bytes(model: ModelInfo, dtype: str, batch: int, max_len: int) -> int:
    """CPU: the KV cache of `batch` sequences of up to min(max_len, 512) tokens, within [0.25, 4] GiB, and
    never below one whole sequence of max_len (vLLM refuses a cache that cannot hold one)."""
    per_token = model.kv_bytes_per_token(dtype)
    need = per_token * batch * min(max_len, 512)
    return int(max(min(4 * GIB, max(GIB // 4, need)), per_token * max_len))


def shared_gpu_bytes(model: ModelInfo, dtype: str, batch: int, max_len: int, batched_tokens: int) -> dict:
    """What the engine needs on a GPU it shares: weights, the KV cache of the whole batch at full length,
    and a margin (the forward's activations over one step's tokens, fp32 logits of the batch, CUDA graphs)."""
    width = _DTYPE_BYTES[dtype]
    weights = model.weight_bytes(dtype)
    kv = model.kv_bytes_per_token(dtype) * batch * max_len
    activations = batched_tokens * (4 * model.hidden + 2 * model.intermediate) * width
    logits = batch * model.vocab * 4
    margin = activations + logits + MARGIN_BYTES
    return {"weights": weights, "kv_cache": kv, "margin": margin, "total": weights + kv + margin}


def vllm_engine_args(
    cfg,
    model: ModelInfo,
    device_kind: str,
    *,
    longest_prompt: int | None = None,
    gpu: GpuMemory | None = None,
    gpu_ids: tuple[int, ...] = (),
    shared_gpu: bool = False,
    env: Mapping[str, str] | None = None,
) -> VLLMArgs:
    """The `vllm.LLM` keywords for `cfg` on `device_kind` ('cpu' or 'cuda'). On CUDA `gpu` is the engine's
    GPU memory at start, `gpu_ids` its GPUs (config.placement) and `shared_gpu` whether a trainer process
    uses one of them. `env`: TS_VLLM_KV_CACHE_GIB / TS_VLLM_EAGER overrides (benchmarks)."""
    env = env or {}
    r = cfg.rollout
    dtype = vllm_dtype(cfg, device_kind)
    batch = r.batch_size
    max_len = required_length(cfg, longest_prompt, model)
    batched_tokens = max(max_len, 8192)
    kwargs: dict = {
        "dtype": dtype,
        "max_model_len": max_len,
        "max_num_seqs": batch,
        "max_num_batched_tokens": batched_tokens,
    }
    notes: dict = {}
    eager_env = env.get("TS_VLLM_EAGER")
    if r.tensor_parallel_size > 1:
        kwargs["tensor_parallel_size"] = r.tensor_parallel_size
    if device_kind == "cpu":
        kwargs["enforce_eager"] = eager_env != "0"  # no torch.compile warm-up on the CPU
        kwargs["block_size"] = CPU_BLOCK_SIZE
        kv = float(env["TS_VLLM_KV_CACHE_GIB"]) * GIB if env.get("TS_VLLM_KV_CACHE_GIB") else None
        kwargs["kv_cache_memory_bytes"] = int(kv) if kv else cpu_kv_bytes(model, dtype, batch, max_len)
        return VLLMArgs(kwargs, max_len, "cpu", notes=notes)
    if device_kind != "cuda":
        raise ConfigError(f"rollout.engine=vllm runs on cpu or cuda, not {device_kind}: set device=cpu or cuda")
    kwargs["enforce_eager"] = eager_env == "1"  # CUDA graphs unless asked otherwise
    if gpu_ids:
        kwargs["device_ids"] = list(gpu_ids)
    if env.get("TS_VLLM_KV_CACHE_GIB"):
        kwargs["kv_cache_memory_bytes"] = int(float(env["TS_VLLM_KV_CACHE_GIB"]) * GIB)
    if r.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = r.gpu_memory_utilization
        return VLLMArgs(kwargs, max_len, "cuda", shared_gpu, notes)
    if gpu is None:
        raise ValueError("a CUDA engine's arguments need its GPU's memory (GpuMemory)")
    # Tensor parallelism splits weights and KV heads over the GPUs: each holds about 1/tp of them.
    tp = r.tensor_parallel_size
    if shared_gpu:
        notes = shared_gpu_bytes(model, dtype, batch, max_len, batched_tokens)
        need = notes["weights"] // tp + notes["kv_cache"] // tp + notes["margin"]
        if need > gpu.free:
            raise ConfigError(
                f"vLLM needs {need / GIB:.1f} GiB on a GPU it shares with the trainer (weights "
                f"{notes['weights'] / tp / GIB:.1f}, KV cache of {batch} x {max_len} tokens "
                f"{notes['kv_cache'] / tp / GIB:.1f}, margin {notes['margin'] / GIB:.1f}) and {gpu.free / GIB:.1f} GiB "
                "are free: lower rollout.batch_size or rollout.max_new_tokens, or give the engine a GPU of its own "
                "(rollout.gpu_ids, update.gpu_ids)"
            )
        share = math.ceil(need / gpu.total * 1e4) / 1e4  # vLLM takes ceil(total x share): at least `need`
    else:
        weights = model.weight_bytes(dtype) // tp
        share = math.floor(FREE_SHARE * gpu.free / gpu.total * 1e4) / 1e4  # never above what is free
        notes = {"weights": weights, "free": gpu.free}
        if weights + MARGIN_BYTES > share * gpu.total:
            raise ConfigError(
                f"vLLM's weights ({weights / GIB:.1f} GiB) do not fit the {gpu.free / GIB:.1f} GiB free on its GPU: "
                "free the GPU, raise rollout.tensor_parallel_size, or set rollout.gpu_ids to another GPU"
            )
    kwargs["gpu_memory_utilization"] = min(share, 0.99)
    return VLLMArgs(kwargs, max_len, "cuda", shared_gpu, notes)
