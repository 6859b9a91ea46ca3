"""Generation engines: sample continuations of token-id prompts and record their log-probs.

Every engine answers one question: given token-id contexts (a prompt, or a prompt plus a seed
prefix), sample a continuation under the *currently loaded* weights and return, for each sampled
token, log π(token | context) at the sampling temperature (before top-p truncation, so that the
trainer can recompute exactly the same number). Weight swaps between the current policy and
historical checkpoints happen in place (`load_weights`), so one engine serves a whole stage.

`HFEngine` is plain transformers with a KV cache; `thinking_seeds.engine.vllm_engine.VLLMEngine` (optional) has
the same interface.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import load_file

from thinking_seeds.engine.decode import LockstepDecode
from thinking_seeds.engine.kv_cache import growing_cache
from thinking_seeds.engine.lora import is_adapter, merged_state_dict
from thinking_seeds.engine.stacked import StackedModel, model_params, weight_bytes
from thinking_seeds.engine.turn_end import model_eos_ids
from thinking_seeds.store.weights_check import check_shapes, model_shapes
from thinking_seeds.transports import live_weights


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    # The contexts are prompts continued past a prefix (the continuation stage, seeded evaluation): an
    # engine may feed a long context's tail through its decode steps instead of prefilling it
    # (HFEngine, `prefill_width`): the same distribution, other samples. Off for drafts, so a draft
    # stopped at its cut keeps the full draft's tokens (tests/unit/test_seeding.py).
    feed_context: bool = False


@dataclass
class Generation:
    """One sampled continuation. `token_ids` excludes the context; `logprobs` aligns with it."""

    token_ids: list[int]
    logprobs: list[float]
    finished: bool  # ended with EOS (True) or hit max_new_tokens (False)


class Engine(Protocol):
    def load_weights(self, checkpoint_dir: str | Path) -> None: ...

    def generate(
        self, contexts: Sequence[Sequence[int]], params: SamplingParams, max_new: Sequence[int] | None = None
    ) -> list[Generation]:
        """Sample one continuation per context; `max_new[i]` caps row i (default params.max_new_tokens)."""
        ...


def token_limits(contexts: Sequence[Sequence[int]], params: SamplingParams, max_new: Sequence[int] | None) -> list[int]:
    """Each request's cap on new tokens: its own `max_new` (e.g. a draft stopped at its cut,
    prefix.ratio_of=budget) never above params.max_new_tokens; every engine reads caps the same way."""
    if max_new is None:
        return [params.max_new_tokens] * len(contexts)
    limits = [min(m, params.max_new_tokens) for m in max_new]
    if len(limits) != len(contexts):
        raise ValueError(f"max_new has {len(limits)} entries for {len(contexts)} contexts")
    return limits


class ContextTooLong(ValueError):
    """A request whose context plus its cap of new tokens does not fit the engine's length: refused, never cut."""


def refuse_overlong(contexts: Sequence[Sequence[int]], limits: Sequence[int], max_len: int | None, fix: str) -> None:
    """Raise `ContextTooLong` (one line) when a request that samples (cap > 0) needs more than `max_len`
    positions, context + cap; `fix` names the setting that would make it fit. A response cut to fit would
    be trained on as if the policy had stopped there: a long chain of thought truncated without a word."""
    if max_len is None:
        return
    for i, (c, n) in enumerate(zip(contexts, limits, strict=True)):
        if n > 0 and len(c) + n > max_len:
            raise ContextTooLong(
                f"request {i}: a context of {len(c)} tokens + {n} new tokens = {len(c) + n} positions, more than the "
                f"engine's {max_len}: {fix}"
            )


# One job of `generate_many`: (checkpoint, contexts, params, max_new).
Job = tuple[str | Path, Sequence[Sequence[int]], SamplingParams, Sequence[int] | None]

# The most weights `HFEngine.generate_many` stacks, held copies included (engine/stacked.py): a step of a
# small model costs its count of operations, not its size, so stacking pays there; a large model's step
# costs its weights' bytes, which stacking does not save, and M copies of it would not fit.
MAX_STACKED_BYTES = 256 * 2**20

LENGTH_FIX = "the model's max_position_embeddings; lower rollout.max_new_tokens or use shorter prompts"


class HFEngine(LockstepDecode):
    """Batched sampling with a transformers causal LM on CPU or GPU.

    Contexts are left-padded into one batch that decodes with one KV cache, allocated once for the
    widest prefill plus the longest cap (kv_cache.py: no copy of the cache per step). Rows that are done
    (EOS or their cap) leave the batch once a quarter of it is done (decode.py: `SHED_DONE_FRACTION`), so a step
    costs what its live rows cost (a 128-row step of the tiny model: 11.5 ms, 32 rows: 4.1 ms).
    Each row samples from its own uniform of the step (sampling.py): its tokens do not depend on
    which rows are left.
    With `params.feed_context`, a context longer than the batch's prefill width (`prefill_width`: a
    seed's prefix with its shorter cap) is fed its remaining tokens through the first decode steps, so
    the continuation of prefixes decodes over the cache width of the prompts alone.
    Everything runs on the model's device: the batch, the KV cache, the sampling generator and the
    per-step tensors; only the finished tokens and log-probs come back to the CPU, once per batch.
    Log-probs are taken from float32 logits whatever the weights' dtype (bf16 weights: bf16 matmuls).
    """

    def __init__(self, model, tokenizer, batch_size: int = 128):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.eos_id = tokenizer.eos_token_id
        self.eos_ids = model_eos_ids(model, tokenizer)  # every id that ends the model's turn (turn_end.py)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.loaded_from: str | None = None
        self._stacked: StackedModel | bool | None = None  # engine/stacked.py: False if the model does not stack

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @staticmethod
    def _source(checkpoint_dir: Path):
        """The identity of the weights at `checkpoint_dir`, and θ handed over in memory if it is (its policy
        id), else None and the files on disk (names, mtimes, sizes: a re-run may rewrite a directory)."""
        live = live_weights.lookup(checkpoint_dir)
        if live is not None:
            return f"live|{checkpoint_dir}|{live.policy_id}", live
        files = [f for f in sorted(checkpoint_dir.glob("*.safetensors")) if f.name != "optimizer.safetensors"]
        return str(checkpoint_dir) + "|" + ",".join(
            f"{f.name}:{f.stat().st_mtime_ns}:{f.stat().st_size}" for f in files
        ), None

    def load_weights(self, checkpoint_dir: str | Path) -> None:
        """Swap in another checkpoint's weights (same architecture) without rebuilding the model."""
        checkpoint_dir = Path(checkpoint_dir)
        tag, live = self._source(checkpoint_dir)
        if self.loaded_from == tag:
            return
        if live is not None:  # θ handed over by the trainer (transports/live_weights.py): no file is read
            self._load_state(live.state, checkpoint_dir)
            self.loaded_from = tag
            return
        files = [f for f in sorted(checkpoint_dir.glob("*.safetensors")) if f.name != "optimizer.safetensors"]
        if (checkpoint_dir / "manifest.json").is_file():  # never swap in weights its manifest does not vouch for
            from thinking_seeds.store.checkpoints import verified

            verified(checkpoint_dir)
        if is_adapter(checkpoint_dir):  # a LoRA step: base + adapters, merged by peft
            state = merged_state_dict(checkpoint_dir, str(self.device))
        else:
            # Read into host memory: load_state_dict copies each tensor into the engine's parameters on their
            # device, cast to their dtype, so an fp32 checkpoint never sits whole on a bf16 engine's GPU.
            # safetensors of this model's shapes, checked from their headers before a byte is loaded
            check_shapes(files, model_shapes(self.model))
            state = {k: v for f in files for k, v in load_file(str(f), device="cpu").items()}
        if not state:
            raise FileNotFoundError(f"no model weights (*.safetensors) in {checkpoint_dir}")
        self._load_state(state, checkpoint_dir)
        self.loaded_from = tag

    def _load_state(self, state: dict, checkpoint_dir: Path) -> None:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        # Tied embeddings are saved once; anything else missing means another architecture.
        missing = [k for k in missing if "lm_head" not in k]
        if missing or unexpected:
            raise ValueError(
                f"checkpoint {checkpoint_dir} does not fit the engine's model: "
                f"missing {missing[:5]}, unexpected {unexpected[:5]}"
            )

    @torch.no_grad()
    def generate(
        self,
        contexts: Sequence[Sequence[int]],
        params: SamplingParams,
        max_new: Sequence[int] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """`progress(n)`: called with the requests done so far after each batch (evaluation's progress lines)."""
        limits = token_limits(contexts, params, max_new)
        # Past max_position_embeddings the positions are ones the model never saw: refuse, as vLLM's engine does.
        refuse_overlong(contexts, limits, getattr(self.model.config, "max_position_embeddings", None), LENGTH_FIX)
        # The same (contexts, params.seed) give the same samples. Each engine batch draws from its own
        # generator, seeded by (params.seed, its first request), so its samples do not depend on how many
        # decode steps the batches before it ran (a draft stopped at its cut ends its batch sooner).
        out: list[Generation] = []
        for batch, caps, gen in self._batches(contexts, limits, params):
            out.extend(Generation(*g) for g in self._decode(self.model, [(batch, caps, gen)], params)[0])
            if progress is not None:
                progress(len(out))
        return out

    def _batches(self, contexts, limits, params: SamplingParams):
        """The engine batches of one call: (contexts, caps, the batch's own generator, seeded by its first request)."""
        for start in range(0, len(contexts), self.batch_size):
            end = start + self.batch_size
            gen = torch.Generator(device=self.device).manual_seed((params.seed * 1_000_003 + start) % 2**63)
            yield contexts[start:end], limits[start:end], gen

    # `generate_many` takes a shard group, shard i of every pool member's drafts (sharding.shard_groups)
    batches_checkpoints = True

    @torch.no_grad()
    def generate_many(self, jobs: Sequence[Job]) -> list[list[Generation]]:
        """`[generate(contexts, params, max_new) under checkpoint, for each job]`, in job order (the seeds
        stage: one job per pool member). When the model stacks (engine/stacked.py) and the jobs' batches
        share their sampling settings, every job's engine batches decode together, one forward per step
        for all of them, up to MAX_STACKED_BYTES of stacked weights at a time; else one weight swap and
        call per job. The same samples either way, up to float rounding (a batched matrix product)."""
        first = jobs[0][2] if jobs else None
        same = first is not None and all(replace(p, seed=0) == replace(first, seed=0) for _, _, p, _ in jobs)
        stacker = self._stacker() if len(jobs) > 1 and same and not first.feed_context else None
        per_decode = MAX_STACKED_BYTES // (2 * stacker.model_bytes) if stacker else 0  # held copies, stacked ones
        if per_decode < 2:
            out = []
            for checkpoint, contexts, params, max_new in jobs:
                self.load_weights(checkpoint)
                out.append(self.generate(contexts, params, max_new))
            return out
        batches = []  # (job, checkpoint, contexts, caps, generator) per engine batch of every job
        for j, (checkpoint, contexts, params, max_new) in enumerate(jobs):
            limits = token_limits(contexts, params, max_new)
            refuse_overlong(contexts, limits, getattr(self.model.config, "max_position_embeddings", None), LENGTH_FIX)
            batches += [(j, Path(checkpoint), *b) for b in self._batches(contexts, limits, params)]
        out = [[] for _ in jobs]
        for at in range(0, len(batches), per_decode):
            part = batches[at : at + per_decode]
            model = stacker.holding([(self._source(b[1])[0], b[1]) for b in part], self._params_of)
            for (j, *_), gens in zip(part, self._decode(model, [b[2:] for b in part], first), strict=True):
                out[j].extend(Generation(*g) for g in gens)
        return out

    def _stacker(self) -> StackedModel | None:
        """The engine's stacked model, built (and checked) on first use; None if this model does not stack."""
        if self._stacked is None:
            # two members, held and stacked, must fit before anything is copied (a 7B model never is)
            fits = 4 * weight_bytes(self.model) <= MAX_STACKED_BYTES and growing_cache(self.model, 1, 1) is not None
            self._stacked = (StackedModel.build(self.model) if fits else None) or False
        return self._stacked or None

    def _params_of(self, checkpoint: Path) -> dict[str, torch.Tensor]:
        self.load_weights(checkpoint)  # its checks (manifest, shapes, adapters) and its read, as a swap's
        return model_params(self.model)
