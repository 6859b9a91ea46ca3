"""Shards of a generation call: the unit that rollout workers run, and what makes 1 worker or N give
the same samples.

A stage's requests (token-id contexts, each with its token budget) are cut, in order, into shards of
`rollout.batch_size` requests; shard i samples with its own seed (`shard_seed`). A shard is exactly one
engine batch, so what a shard samples depends only on its own requests and seed, never on which worker
runs it or what else that worker runs. The results are gathered back in request order.

Shard 0 keeps the call's seed: a call that fits in one batch (every preset's seeds and continuation
stages) samples exactly what one engine call with that seed samples.

`LocalRollout` runs the shards in this process, one after the other: the 1-worker case of the same logic.
`thinking_seeds.engine.ray_workers.RayRolloutPool` runs them on Ray actors.

`generate_sharded_many` is several such calls, each under its own checkpoint (the seeds stage: one per
pool member), cut into the same shards with the same seeds; a runner with `run_many` (`LocalRollout` on
a VLLMEngine serving LoRA adapters per request or on an HFEngine, which stacks the checkpoints' weights;
`RayRolloutPool` on HF workers) samples each group of shards (`shard_groups`: shard i of every call) in
one engine call, any other runs the calls one after the other (one weight swap each).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from thinking_seeds.engine.rollout import Generation, SamplingParams, token_limits

TimerLike = Callable[[str], AbstractContextManager]


def _no_timer(_: str) -> AbstractContextManager:
    return nullcontext()


@dataclass(frozen=True)
class Shard:
    """Requests [start, start + len(contexts)) of a call, sampled with `params` (its own seed)."""

    index: int
    start: int
    contexts: list[list[int]]
    max_new: list[int]
    params: SamplingParams


def shard_seed(seed: int, index: int) -> int:
    """The seed of shard `index` of a call seeded with `seed` (shard 0: the call's own seed)."""
    if index == 0:
        return seed
    h = hashlib.blake2b(f"{seed}/shard/{index}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "little")


def make_shards(
    contexts: Sequence[Sequence[int]], params: SamplingParams, max_new: Sequence[int] | None, shard_size: int
) -> list[Shard]:
    """Cut a call into shards of `shard_size` requests, in order; independent of the number of workers."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    limits = token_limits(contexts, params, max_new)
    return [
        Shard(
            i,
            start,
            [list(c) for c in contexts[start : start + shard_size]],
            limits[start : start + shard_size],
            replace(params, seed=shard_seed(params.seed, i)),
        )
        for i, start in enumerate(range(0, len(contexts), shard_size))
    ]


class ShardRunner(Protocol):
    def run(self, checkpoint: Path, shards: list[Shard], timer: TimerLike = _no_timer) -> list[list[Generation]]:
        """The generations of every shard (same order), sampled under the weights at `checkpoint`."""
        ...


def generate_sharded(
    runner: ShardRunner,
    checkpoint: str | Path,
    contexts: Sequence[Sequence[int]],
    params: SamplingParams,
    max_new: Sequence[int] | None = None,
    shard_size: int = 128,
    timer: TimerLike = _no_timer,
) -> list[Generation]:
    """One continuation per context, in order, whoever runs the shards."""
    if not contexts:
        return []
    shards = make_shards(contexts, params, max_new, shard_size)
    return _joined(shards, runner.run(Path(checkpoint), shards, timer))


def _joined(shards: Sequence[Shard], results: Sequence[list[Generation]]) -> list[Generation]:
    """The shards' generations in request order; a shard that lost or gained one is an error, not a shift."""
    out: list[Generation] = []
    for shard, gens in zip(shards, results, strict=True):
        if len(gens) != len(shard.contexts):
            raise RuntimeError(f"shard {shard.index} came back with {len(gens)} of {len(shard.contexts)} generations")
        out.extend(gens)
    return out


# One call of generate_sharded_many: (checkpoint, contexts, params, max_new).
Call = tuple[Path, Sequence[Sequence[int]], SamplingParams, Sequence[int] | None]


def generate_sharded_many(
    runner: ShardRunner,
    calls: Sequence[Call],
    shard_size: int = 128,
    timer: TimerLike = _no_timer,
    keys: Sequence[Hashable] | None = None,
) -> list[list[Generation]]:
    """`[generate_sharded(runner, *call, shard_size) for call in calls]`: the same shards and seeds, one
    engine call per shard group when the runner samples several checkpoints at once (`run_many`,
    `shard_groups`; `keys`: a key per call, only calls of one key share a group), else call after call."""
    many = getattr(runner, "run_many", None)
    if many is None or not getattr(runner, "batches_checkpoints", False):
        return [generate_sharded(runner, ck, ctx, p, mn, shard_size, timer) for ck, ctx, p, mn in calls]
    plans = [(Path(ck), make_shards(ctx, p, mn, shard_size)) for ck, ctx, p, mn in calls]
    groups = shard_groups(plans, keys)
    return [_joined(shards, gens) for (_, shards), gens in zip(plans, many(plans, groups, timer), strict=True)]


class LocalRollout:
    """The shards, one after the other, on this process's engine (cluster=local)."""

    def __init__(self, engine) -> None:
        self.engine = engine

    @property
    def batches_checkpoints(self) -> bool:
        """Whether the engine samples several checkpoints in one call (vLLM: LoRA adapters per request; the
        HF engine: stacked weights, engine/stacked.py)."""
        return bool(getattr(self.engine, "batches_checkpoints", False)) and hasattr(self.engine, "generate_many")

    def run(self, checkpoint: Path, shards: list[Shard], timer: TimerLike = _no_timer) -> list[list[Generation]]:
        with timer("weight_swap"):
            self.engine.load_weights(checkpoint)
        with timer("generation"):
            return [self.engine.generate(s.contexts, s.params, s.max_new) for s in shards]

    def run_many(
        self, plans: list[tuple[Path, list[Shard]]], groups: list[list[tuple[int, int]]], timer: TimerLike = _no_timer
    ) -> list[list[list[Generation]]]:
        """Every shard of every (checkpoint, shards), one `generate_many` call per group of `shard_groups`
        (one job per shard), as each Ray worker runs a group (engine/ray_workers.py)."""
        out: list[list] = [[None] * len(shards) for _, shards in plans]
        with timer("generation"):
            for group in groups:
                shards = [(plans[p][0], plans[p][1][i]) for p, i in group]
                jobs = [(ck, s.contexts, s.params, s.max_new) for ck, s in shards]
                for (p, i), gens in zip(group, self.engine.generate_many(jobs), strict=True):
                    out[p][i] = gens
        return out


def shard_groups(
    plans: Sequence[tuple[Path, Sequence[Shard]]], keys: Sequence[Hashable] | None = None
) -> list[list[tuple[int, int]]]:
    """The shards of several calls (the seeds stage: one per pool member) grouped for `generate_many`:
    shard i of every call with the same key (default: one key for all), as (call, shard) indices, calls
    in order. A group is what an engine samples at once (the HF engine: stacked weights, engine/stacked.py),
    and its numbers depend on the group, so whatever is sampled in groups is grouped by this alone: one
    process or N Ray workers, the seeds of one iteration or of a block (pipeline.seeds_block, keyed by
    iteration), the same groups and the same numbers, bit for bit."""
    groups: dict[tuple[Hashable, int], list[tuple[int, int]]] = {}
    for p, (_, shards) in enumerate(plans):
        for i in range(len(shards)):
            groups.setdefault((keys[p] if keys is not None else None, i), []).append((p, i))
    return list(groups.values())


def build_engine(
    initial_checkpoint: str | Path, cfg, longest_prompt: int | None = None, shared_gpu: bool | None = None
):
    """The engine `cfg` asks for (a RunConfig: rollout.engine, engine dtype, device, batch size), built
    from the run's θ_0: in the driver for cluster=local, in each Ray rollout worker otherwise. vLLM sizes
    its max_model_len from `longest_prompt` (tokens) + rollout.max_new_tokens (engine/vllm_args.py)."""
    if cfg.rollout.engine == "vllm":
        from thinking_seeds.engine.vllm_engine import VLLMEngine  # optional extra

        return VLLMEngine(initial_checkpoint, cfg, longest_prompt=longest_prompt, shared_gpu=shared_gpu)
    import torch

    from thinking_seeds.config.placement import engine_gpus
    from thinking_seeds.engine.models import load_model
    from thinking_seeds.engine.rollout import HFEngine

    # On the engine's GPU (`device`, or rollout.gpu_ids: config/placement.py) or the CPU, in bf16 whenever
    # bf16 is in play (cfg.engine_dtype).
    gpus = engine_gpus(cfg, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    model, tok = load_model(initial_checkpoint, cfg.engine_dtype, device=f"cuda:{gpus[0]}" if gpus else "cpu")
    return HFEngine(model, tok, batch_size=cfg.rollout.batch_size)
