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

from thinking_seeds.engine.kv_cache import growing_cache
from thinking_seeds.engine.lora import is_adapter, merged_state_dict
from thinking_seeds.engine.prefill import group_width, prefill_groups, prefill_width, unique_contexts
from thinking_seeds.engine.sampling import sample_rows, top_p_filter
from thinking_seeds.engine.stacked import StackedModel, model_params
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
            out.extend(self._decode(self.model, [(batch, caps, gen)], params)[0])
            if progress is not None:
                progress(len(out))
        return out

    def _batches(self, contexts, limits, params: SamplingParams):
        """The engine batches of one call: (contexts, caps, the batch's own generator, seeded by its first request)."""
        for start in range(0, len(contexts), self.batch_size):
            end = start + self.batch_size
            gen = torch.Generator(device=self.device).manual_seed((params.seed * 1_000_003 + start) % 2**63)
            yield contexts[start:end], limits[start:end], gen

    # `generate_many` takes every pool member's drafts in one call (engine/sharding.py's LocalRollout.run_many)
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
                out[j].extend(gens)
        return out

    def _stacker(self) -> StackedModel | None:
        """The engine's stacked model, built (and checked) on first use; None if this model does not stack."""
        if self._stacked is None:
            built = StackedModel.build(self.model) if growing_cache(self.model, 1, 1) is not None else None
            self._stacked = built or False
        return self._stacked or None

    def _params_of(self, checkpoint: Path) -> dict[str, torch.Tensor]:
        self.load_weights(checkpoint)  # its checks (manifest, shapes, adapters) and its read, as a swap's
        return model_params(self.model)

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

    def _grouped_prefill(self, model, contexts, L: int, cache, row_groups: int = 1) -> torch.Tensor:
        """Prefill the batch in groups of similar context length (`prefill_groups`), each padded only
        to its own widest context, into `cache` at the positions the whole batch left-padded to L
        would give them; the logits of each row's last context token. A batch mixing prompts with
        prompt + prefix contexts (the continuation stage) computes no padding wider than its group.
        Identical contexts (a group's samples of one prompt) are prefilled once and their keys,
        values and logits copied to every row that has them. `row_groups` > 1: a stacked model's batch
        (engine/stacked.py), one forward whose row groups stay whole and equal: each row group's
        distinct contexts, padded to the most any group has."""
        B = len(contexts)
        if row_groups > 1:
            S = B // row_groups
            per = [unique_contexts(contexts[j * S : (j + 1) * S]) for j in range(row_groups)]
            U = max(len(u) for u, _ in per)
            uniq, rows_of = [], []
            for j, (u, rows) in enumerate(per):
                uniq += [*u, *[u[0]] * (U - len(u))]
                rows_of += [[j * S + i for i in r] for r in rows] + [[]] * (U - len(u))
            groups = [list(range(len(uniq)))]
        else:
            uniq, rows_of = unique_contexts(contexts)
            groups = prefill_groups([len(c) for c in uniq])
        logits = None
        for group in groups:
            w = group_width(max(len(uniq[u]) for u in group), L)
            ids, attn, pos = self._left_padded([uniq[u] for u in group], w)
            # logits_to_keep=1: only the last position is sampled from; the (rows, width, V) logits of the
            # whole context would be ~20 GB for 128 rows x 256 tokens at a 152k vocabulary
            res = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
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

    def _decode(self, model, batches: list[tuple[list, list[int], torch.Generator]], params: SamplingParams):
        """Sample every engine batch of `batches` (contexts, caps, generator) in one decode: one batch on the
        engine's model, or several on a stacked model (engine/stacked.py), batch j in row group j. Groups
        are padded to one size with rows that sample nothing, so every forward sees equal groups."""
        dev = self.device
        J, S = len(batches), max(len(c) for c, _, _ in batches)
        contexts = [c for ctx, _, _ in batches for c in [*ctx, *[ctx[0]] * (S - len(ctx))]]
        limits = [n for ctx, lim, _ in batches for n in [*lim, *[0] * (S - len(ctx))]]
        B = len(contexts)
        if max(limits) <= 0:
            return [[Generation([], [], False) for _ in ctx] for ctx, _, _ in batches]
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
        past = growing_cache(model, L + steps, B)
        sheds = past is not None  # the model's own cache (sliding windows...): every row to the last step
        if past is None:  # the model's own cache: one prefill of the whole padded batch
            res = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
            past, logits = res.past_key_values, res.logits[:, -1, :]
        else:
            logits = self._grouped_prefill(model, heads, L, past, row_groups=J)
        next_pos = pos[:, -1] + 1

        tokens = torch.full((B, steps), self.pad_id, dtype=torch.long, device=dev)
        logps = torch.zeros((B, steps), dtype=torch.float32, device=dev)
        limit_t = torch.tensor(limits, dtype=torch.long, device=dev)
        done = limit_t <= 0
        lengths = limit_t.clamp(min=0)  # sampled tokens per request, until EOS says otherwise
        eos = torch.tensor(self.eos_ids, dtype=torch.long, device=dev)
        group = torch.arange(B, device=dev) // S  # the row group (engine batch) of each request
        # The batch sheds its finished rows once SHED_DONE_FRACTION of them are done (each shedding copies
        # the live rows' cache), so a step costs what its live rows cost: a seed's continuation, with its
        # shorter cap, leaves early. `rows`: the request each slot now holds; per-slot state is cut with it.
        rows = torch.arange(B, device=dev)
        zeros = {S - len(c): torch.zeros(S - len(c), device=dev, dtype=torch.float64) for c, _, _ in batches}
        for t in range(steps):
            logp_all = torch.log_softmax(logits.float() / params.temperature, dim=-1)
            probs = top_p_filter(logp_all.exp(), params.top_p)
            # one uniform per request of its batch, from the batch's generator, live or not: a row's sample
            # never depends on which rows are left, nor on the batches decoded beside its own (sampling.py)
            u = []
            for ctx, _, g in batches:
                u.append(torch.rand(len(ctx), generator=g, device=dev, dtype=torch.float64))
                if len(ctx) < S:  # a padding row samples nothing
                    u.append(zeros[S - len(ctx)])
            tok = sample_rows(probs, (u[0] if len(u) == 1 else torch.cat(u))[rows])
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
            keep = _kept_rows(group[rows] if J > 1 else None, done, J, live) if sheds else None
            if keep is not None:
                rows, tok, attn, next_pos, done, n_forced, limit_t, forced = (
                    x[keep] for x in (rows, tok, attn, next_pos, done, n_forced, limit_t, forced)
                )
                past.batch_select_indices(keep)
            attn = torch.cat([attn, (~done).long()[:, None]], dim=1)
            res = model(
                input_ids=tok[:, None],
                attention_mask=attn,
                position_ids=next_pos[:, None],
                past_key_values=past,
                use_cache=True,
            )
            past, logits = res.past_key_values, res.logits[:, -1, :]
            next_pos = next_pos + 1

        tokens, logps, lengths = tokens.cpu(), logps.cpu(), lengths.cpu()
        out = []
        for j, (ctx, _, _) in enumerate(batches):
            gens = []
            for i in range(j * S, j * S + len(ctx)):
                a, n = len(tails[i]), int(lengths[i])
                ids_i = tokens[i, a : a + n].tolist()
                gens.append(
                    Generation(ids_i, logps[i, a : a + n].tolist(), finished=bool(ids_i) and ids_i[-1] in self.eos_ids)
                )
            out.append(gens)
        return out


def _kept_rows(group: torch.Tensor | None, done: torch.Tensor, groups: int, live: int) -> torch.Tensor | None:
    """The slots a shedding keeps, or None while fewer than SHED_DONE_FRACTION of the slots would go: in
    each row group its live rows, then as many of its finished rows as make every group as large as the
    liveliest one (one group: exactly the live rows), groups in order."""
    n = len(done)
    if groups == 1:
        return (~done).nonzero().squeeze(-1) if n - live >= SHED_DONE_FRACTION * n else None
    size = int(torch.bincount(group[~done], minlength=groups).max())
    if n - groups * size < SHED_DONE_FRACTION * n:
        return None
    order = torch.argsort(group * 2 + done.long(), stable=True)  # by group, live first, slots in order
    slots = torch.bincount(group, minlength=groups)
    start = torch.cumsum(slots, 0) - slots
    rank = torch.arange(n, device=done.device) - start[group[order]]
    return order[rank < size]
