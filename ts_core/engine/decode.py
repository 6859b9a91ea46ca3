"""The HF engine's decode (engine/rollout.py): contexts left-padded into one KV cache, prefilled in groups,
then sampled in lock-step, one token per row per step, the finished rows shed as they accumulate. Several
engine batches can decode at once on a stacked model (engine/stacked.py), each in a row group of its own.

`LockstepDecode` is a mixin: HFEngine gives it `device`, `pad_id` and `eos_ids`. Its `_decode` returns
(token ids, log-probs, finished) per request; the engine wraps them as Generations.
"""

from __future__ import annotations

import torch

from thinking_seeds.engine.kv_cache import growing_cache
from thinking_seeds.engine.prefill import group_width, prefill_groups, prefill_width, unique_contexts
from thinking_seeds.engine.sampling import sample_rows, top_p_filter

# A decode batch drops its finished rows once this fraction of them are done. Lower sheds more often, each
# time copying the live rows' KV cache; a quarter bounds the sheddings of a 128-row batch at ~17.
SHED_DONE_FRACTION = 0.25


class LockstepDecode:
    """The decode of HFEngine (rollout.py), apart from its weights and its requests' bookkeeping."""

    device: torch.device
    pad_id: int
    eos_ids: list[int]

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

    def _decode(self, model, batches: list[tuple[list, list[int], torch.Generator]], params):
        """Sample every engine batch of `batches` (contexts, caps, generator) in one decode: one batch on the
        engine's model, or several on a stacked model (engine/stacked.py), batch j in row group j. Groups
        are padded to one size with rows that sample nothing, so every forward sees equal groups."""
        dev = self.device
        J, S = len(batches), max(len(c) for c, _, _ in batches)
        contexts = [c for ctx, _, _ in batches for c in [*ctx, *[ctx[0]] * (S - len(ctx))]]
        limits = [n for ctx, lim, _ in batches for n in [*lim, *[0] * (S - len(ctx))]]
        B = len(contexts)
        if max(limits) <= 0:
            return [[([], [], False) for _ in ctx] for ctx, _, _ in batches]
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
            keep = kept_rows(group[rows] if J > 1 else None, done, J, live) if sheds else None
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
                gens.append((ids_i, logps[i, a : a + n].tolist(), bool(ids_i) and ids_i[-1] in self.eos_ids))
            out.append(gens)
        return out


def kept_rows(group: torch.Tensor | None, done: torch.Tensor, groups: int, live: int) -> torch.Tensor | None:
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
