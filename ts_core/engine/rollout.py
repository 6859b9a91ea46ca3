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
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import load_file

from thinking_seeds.engine.kv_cache import growing_cache
from thinking_seeds.engine.lora import is_adapter, merged_state_dict
from thinking_seeds.engine.prefill import group_width, prefill_groups, prefill_width, unique_contexts
from thinking_seeds.engine.sampling import sample_rows, top_p_filter
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


# A decode batch drops its finished rows once this fraction of them are done. Lower sheds more often, each
# time copying the live rows' KV cache; a quarter bounds the sheddings of a 128-row batch at ~17.
SHED_DONE_FRACTION = 0.25


class HFEngine:
    """Batched sampling with a transformers causal LM on CPU or GPU.

    Contexts are left-padded into one batch that decodes with one KV cache, allocated once for the
    widest prefill plus the longest cap (kv_cache.py: no copy of the cache per step). Rows that are done
    (EOS or their cap) leave the batch once a quarter of it is done (`SHED_DONE_FRACTION`), so a step
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

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def load_weights(self, checkpoint_dir: str | Path) -> None:
        """Swap in another checkpoint's weights (same architecture) without rebuilding the model."""
        checkpoint_dir = Path(checkpoint_dir)
        live = live_weights.lookup(checkpoint_dir)
        if live is not None:  # θ handed over by the trainer (transports/live_weights.py): no file is read
            tag = f"live|{checkpoint_dir}|{live.policy_id}"
            if self.loaded_from != tag:
                self._load_state(live.state, checkpoint_dir)
                self.loaded_from = tag
            return
        files = [f for f in sorted(checkpoint_dir.glob("*.safetensors")) if f.name != "optimizer.safetensors"]
        # Identity of the weights on disk, not just the path: a re-run may rewrite a directory.
        tag = str(checkpoint_dir) + "|" + ",".join(f"{f.name}:{f.stat().st_mtime_ns}:{f.stat().st_size}" for f in files)
        if self.loaded_from == tag:
            return
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
        refuse_overlong(
            contexts,
            limits,
            getattr(self.model.config, "max_position_embeddings", None),
            "the model's max_position_embeddings; lower rollout.max_new_tokens or use shorter prompts",
        )
        # The same (contexts, params.seed) give the same samples. Each engine batch draws from its own
        # generator, seeded by (params.seed, its first request), so its samples do not depend on how many
        # decode steps the batches before it ran (a draft stopped at its cut ends its batch sooner).
        out: list[Generation] = []
        for start in range(0, len(contexts), self.batch_size):
            end = start + self.batch_size
            gen = torch.Generator(device=self.device).manual_seed((params.seed * 1_000_003 + start) % 2**63)
            out.extend(self._generate_batch(contexts[start:end], limits[start:end], params, gen))
            if progress is not None:
                progress(len(out))
        return out

    def _left_padded(self, contexts, width: int):
        """Ids, attention mask and positions of `contexts` left-padded to `width`, on the model's device
        (built on the CPU and moved once: one host-to-device copy, not one per row)."""
        ids = torch.full((len(contexts), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, width - len(c) :] = torch.tensor(list(c), dtype=torch.long)
            attn[i, width - len(c) :] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        return ids, attn, (attn.cumsum(-1) - 1).clamp(min=0)

    def _grouped_prefill(self, contexts, L: int, cache) -> torch.Tensor:
        """Prefill the batch in groups of similar context length (`prefill_groups`), each padded only
        to its own widest context, into `cache` at the positions the whole batch left-padded to L
        would give them; the logits of each row's last context token. A batch mixing prompts with
        prompt + prefix contexts (the continuation stage) computes no padding wider than its group.
        Identical contexts (a group's samples of one prompt) are prefilled once and their keys,
        values and logits copied to every row that has them."""
        B = len(contexts)
        uniq, rows_of = unique_contexts(contexts)
        logits = None
        for group in prefill_groups([len(c) for c in uniq]):
            w = group_width(max(len(uniq[u]) for u in group), L)
            ids, attn, pos = self._left_padded([uniq[u] for u in group], w)
            # logits_to_keep=1: only the last position is sampled from; the (rows, width, V) logits of the
            # whole context would be ~20 GB for 128 rows x 256 tokens at a 152k vocabulary
            res = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
            # every row of the batch whose context is one of this group's, and where its prefill sits
            src = torch.tensor(
                [j for j, u in enumerate(group) for _ in rows_of[u]], dtype=torch.long, device=self.device
            )
            idx = torch.tensor([i for u in group for i in rows_of[u]], dtype=torch.long, device=self.device)
            for layer, part in zip(cache.layers, res.past_key_values.layers, strict=True):
                layer.put(idx, L - w, part.keys[src], part.values[src])
            last = res.logits[:, -1, :]
            if logits is None:
                logits = last.new_empty((B, last.shape[-1]))
            logits[idx] = last[src]
        for layer in cache.layers:
            layer.filled(L)
        return logits

    def _generate_batch(
        self, contexts, limits: list[int], params: SamplingParams, gen: torch.Generator
    ) -> list[Generation]:
        dev = self.device
        B = len(contexts)
        if max(limits) <= 0:
            return [Generation([], [], False) for _ in contexts]
        steps = max(limits)
        if min(len(c) for c in contexts) == 0:
            raise ValueError("empty context: every prompt needs at least one token")
        lens = [len(c) for c in contexts]
        L = prefill_width(lens, limits) if params.feed_context else max(lens)
        heads = [c[:L] for c in contexts]
        tails = [list(c[L:]) for c in contexts]  # fed through the first decode steps (feed_context)
        forced = torch.full((B, max(1, *map(len, tails))), self.pad_id, dtype=torch.long)
        for i, tail in enumerate(tails):
            forced[i, : len(tail)] = torch.tensor(tail, dtype=torch.long)
        forced = forced.to(dev)
        n_forced = torch.tensor([len(t) for t in tails], dtype=torch.long, device=dev)
        ids, attn, pos = self._left_padded(heads, L)  # the whole batch's mask and positions: every step's
        past = growing_cache(self.model, L + steps, B)
        sheds = past is not None  # the model's own cache (sliding windows...): every row to the last step
        if past is None:  # the model's own cache: one prefill of the whole padded batch
            res = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
            past, logits = res.past_key_values, res.logits[:, -1, :]
        else:
            logits = self._grouped_prefill(heads, L, past)
        next_pos = pos[:, -1] + 1

        tokens = torch.full((B, steps), self.pad_id, dtype=torch.long, device=dev)
        logps = torch.zeros((B, steps), dtype=torch.float32, device=dev)
        limit_t = torch.tensor(limits, dtype=torch.long, device=dev)
        done = limit_t <= 0
        lengths = limit_t.clamp(min=0)  # sampled tokens per request, until EOS says otherwise
        eos = torch.tensor(self.eos_ids, dtype=torch.long, device=dev)
        # The batch sheds its finished rows once SHED_DONE_FRACTION of them are done (each shedding copies
        # the live rows' cache), so a step costs what its live rows cost: a seed's continuation, with its
        # shorter cap, leaves early. `rows`: the request each slot now holds; per-slot state is cut with it.
        rows = torch.arange(B, device=dev)
        for t in range(steps):
            logp_all = torch.log_softmax(logits.float() / params.temperature, dim=-1)
            probs = top_p_filter(logp_all.exp(), params.top_p)
            # one uniform per request of the batch, live or not: a row's sample never depends on which
            # rows are left (sampling.py)
            tok = sample_rows(probs, torch.rand(B, generator=gen, device=dev, dtype=torch.float64)[rows])
            forcing = n_forced > t  # still feeding its context: that token, not a sample
            if t < forced.shape[1]:
                tok = torch.where(forcing, forced[:, t], tok)
            tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
            tokens[rows, t] = tok
            logps[rows, t] = torch.where(done | forcing, 0.0, logp_all.gather(-1, tok[:, None]).squeeze(-1))
            sampled = t + 1 - n_forced  # tokens this row has sampled, this one included
            newly = ~done & ~forcing & torch.isin(tok, eos)
            lengths[rows] = torch.where(newly, sampled, lengths[rows])
            done = done | newly | (~forcing & (limit_t <= sampled))  # a row at its cap stops (not finished)
            live = int((~done).sum())
            if live == 0 or t == steps - 1:
                break
            if sheds and len(rows) - live >= SHED_DONE_FRACTION * len(rows):
                keep = (~done).nonzero().squeeze(-1)
                rows, tok, attn, next_pos, done, n_forced, limit_t, forced = (
                    x[keep] for x in (rows, tok, attn, next_pos, done, n_forced, limit_t, forced)
                )
                past.batch_select_indices(keep)
            attn = torch.cat([attn, (~done).long()[:, None]], dim=1)
            res = self.model(
                input_ids=tok[:, None],
                attention_mask=attn,
                position_ids=next_pos[:, None],
                past_key_values=past,
                use_cache=True,
            )
            past, logits = res.past_key_values, res.logits[:, -1, :]
            next_pos = next_pos + 1

        tokens, logps, lengths = tokens.cpu(), logps.cpu(), lengths.cpu()
        gens = []
        for i in range(B):
            a = len(tails[i])
            n = int(lengths[i])
            ids_i = tokens[i, a : a + n].tolist()
            gens.append(
                Generation(ids_i, logps[i, a : a + n].tolist(), finished=bool(ids_i) and ids_i[-1] in self.eos_ids)
            )
        return gens
