"""The HF engine's KV cache (rollout.py): room for the whole generation from the first write, and rows
that leave the batch when they are done.

transformers' DynamicLayer `torch.cat`s the whole cache every decode step: a fresh batch x heads x
positions x head_dim tensor per layer per step, so a step costs more the longer the contexts. Here each
step writes its position in place. `batch_select_indices` (transformers' name, called through the cache)
drops the rows that have finished (the decode loop does so when a quarter of the batch is done), so a step
costs what its live rows cost.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

__all__ = ["GrowingLayer", "growing_cache"]


class GrowingLayer(DynamicLayer):
    """One layer's keys and values, allocated for `capacity` positions of `batch` rows. Attention reads
    views of the filled part: the same values with the same inner strides, so it computes the same
    numbers as over transformers' own tensors, and the samples are the same bytes."""

    def __init__(self, capacity: int, batch: int):
        super().__init__()
        self.capacity, self.batch = capacity, batch

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        k, v = key_states, value_states
        self._k = k.new_empty((self.batch, k.shape[1], self.capacity, k.shape[-1]))
        self._v = v.new_empty((self.batch, v.shape[1], self.capacity, v.shape[-1]))
        self._n = 0
        self.is_initialized = True

    def put(self, rows: torch.Tensor, start: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """A prefill group's keys and values: rows `rows`, positions [start, start + its width); zeros
        before `start` (padding: attention reads it masked, and 0 * NaN from uninitialised memory is not 0)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        w = key_states.shape[-2]
        for cache, states in ((self._k, key_states), (self._v, value_states)):
            if start:
                cache[rows, :, :start] = 0.0
            cache[rows, :, start : start + w] = states

    def filled(self, n: int) -> None:
        """Positions [0, n) hold the prefill of every row (its padding masked)."""
        self._n = n
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, m = self._n, key_states.shape[-2]
        if n + m > self.capacity:
            raise RuntimeError(f"KV cache full: {n} + {m} positions > capacity {self.capacity}")
        self._k[:, :, n : n + m].copy_(key_states)
        self._v[:, :, n : n + m].copy_(value_states)
        self._n = n + m
        self.keys, self.values = self._k[:, :, : n + m], self._v[:, :, : n + m]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only batch rows `indices` (in that order): transformers' Cache.batch_select_indices calls it
        on every layer. Only the filled positions are copied, into a cache of the same capacity."""
        n = self._n
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_empty((len(indices), *old.shape[1:]))
            new[:, :, :n] = old[:, :, :n].index_select(0, indices)
            setattr(self, name, new)
        self.batch = len(indices)
        self.filled(n)


def growing_cache(model, capacity: int, batch: int) -> DynamicCache | None:
    """A cache of `GrowingLayer`s when every layer is plain full attention (DynamicLayer), else None:
    the model builds its own (sliding windows and other layer types keep transformers' handling, and
    their rows decode in lock-step to the end)."""
    try:
        cache = DynamicCache(config=model.config)
    except Exception:  # a config transformers cannot read layer types from: keep the default
        return None
    if not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [GrowingLayer(capacity, batch) for _ in cache.layers]
    return cache
