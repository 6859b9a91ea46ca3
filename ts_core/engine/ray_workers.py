"""Rollout workers on Ray (cluster=ray): actors that each hold an engine and run shards.

Each `RolloutWorker` builds its engine (HF, or vLLM with rollout.tensor_parallel_size GPUs) on the GPUs
it reserves (rollout.worker_gpus; unset: tied to `device` and the tensor parallelism, config/placement.py)
from the run's θ_0 and swaps weights *by checkpoint path*: every
shard names the checkpoint it is sampled under and the worker loads it if it holds other weights
(HFEngine/VLLMEngine.load_weights are no-ops for the weights already loaded). The path must therefore
be readable on every node: the run directory lives on a filesystem shared by the machines (NFS, a
cluster filesystem; docs/scaling.md measures the swap). A restarted worker (Ray reruns its
constructor after a crash) loads the weights the next shard names: no state is lost with it.

With cluster.weights=object_store no filesystem is shared: the driver verifies a checkpoint, puts its
weight files into Ray's object store once (`ray.put`, a handful of checkpoints kept), and passes the
reference wrapped in a list, so Ray does not resolve it for every shard; a worker fetches it only for a
checkpoint it has not copied yet, writes the files to its own temp dir and loads them from there. What
crosses the object store, and its tags, is transports/ray_objects.py.

A policy the trainer handed over in memory (transports/live_weights.py: no file exists for it) goes the same
way in either mode, as tensors: the driver puts θ's state dict into the object store once, and each
worker fetches it once and holds it in its own live_weights under the checkpoint's path, where its
engine's load_weights looks before any file.

`RayRolloutPool.run` is the `ShardRunner` of engine/sharding.py: the shards fan out over the workers
(data/ray_pool.fan_out: first free worker takes the next shard, a shard whose worker died is retried)
and come back in order. Which worker ran a shard never changes what it sampled.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from thinking_seeds.config.placement import ray_worker_gpus
from thinking_seeds.data.ray_pool import actor_options, fan_out, wait_started
from thinking_seeds.engine.rollout import Generation
from thinking_seeds.engine.sharding import Shard, TimerLike, _no_timer, build_engine
from thinking_seeds.transports import live_weights
from thinking_seeds.transports.ray_objects import (
    KEEP_CHECKPOINTS,
    checkpoint_files,
    checkpoint_tag,
    is_live,
    live_policy_id,
    live_state,
    live_tag,
    write_checkpoint,
)


def worker_config(cfg, worker_gpus: float):
    """The run config as a rollout worker's engine sees it: Ray hands the actor its reserved GPUs as
    cuda:0.. (CUDA_VISIBLE_DEVICES), so the engine runs on `cuda` when it reserved any, else on the CPU,
    and the driver's own GPU choice (`device`, rollout.gpu_ids) does not apply there."""
    rollout = cfg.rollout.model_copy(update={"gpu_ids": None})  # copies: no validation (nor its plugin checks)
    return cfg.model_copy(update={"device": "cuda" if worker_gpus > 0 else "cpu", "rollout": rollout})


class RolloutWorker:
    """One engine in one Ray actor (a process on some node of the cluster)."""

    def __init__(self, initial_checkpoint: str, cfg, worker_gpus: float = 0.0, longest_prompt: int | None = None):
        import torch

        # Ray sets OMP_NUM_THREADS to the actor's num_cpus; torch reads it only at import in a fresh process.
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        # A fraction of a GPU (worker_gpus < 1) is a GPU shared with other workers: vLLM takes only its need.
        shared = 0 < worker_gpus < 1
        self.engine = build_engine(initial_checkpoint, worker_config(cfg, worker_gpus), longest_prompt, shared)
        self._live_keep = live_weights.keep_for(cfg.pipeline.max_staleness)  # as many as the driver holds
        self._copies: OrderedDict[str, Path] = OrderedDict()  # object_store: tag -> this worker's copy
        self._copies_root: Path | None = None

    def _local_copy(self, tag: str, box: list) -> Path:
        """This worker's copy of the checkpoint `tag` (fetched from the object store once)."""
        if tag in self._copies:
            self._copies.move_to_end(tag)
            return self._copies[tag]
        import ray

        if self._copies_root is None:
            self._copies_root = Path(tempfile.mkdtemp(prefix="ts-weights-"))
        files: dict[str, bytes] = ray.get(box[0])
        out = write_checkpoint(files, self._copies_root / hashlib.sha256(tag.encode()).hexdigest()[:16])
        self._copies[tag] = out
        while len(self._copies) > KEEP_CHECKPOINTS:
            shutil.rmtree(self._copies.popitem(last=False)[1], ignore_errors=True)
        return out

    def _hold_live(self, checkpoint: str, tag: str, box: list) -> None:
        """θ handed over in memory: fetched once, held where the engine's load_weights looks first."""
        policy_id = live_policy_id(tag)
        held = live_weights.lookup(checkpoint)
        if held is None or held.policy_id != policy_id:
            import ray

            live_weights.publish(checkpoint, policy_id, ray.get(box[0]), keep=self._live_keep)

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """The id of the Ray node (machine) this worker runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def run_shard(
        self, checkpoint: str, shard: Shard, shipped: tuple[str, list] | None = None
    ) -> tuple[list[Generation], float, float]:
        """The shard's generations under `checkpoint` (object_store: `shipped` = (tag, [ref to its files])),
        with the seconds spent swapping (fetching included) and generating."""
        t0 = time.perf_counter()
        self.engine.load_weights(self._checkpoint(checkpoint, shipped))
        t1 = time.perf_counter()
        gens = self.engine.generate(shard.contexts, shard.params, shard.max_new)
        return gens, t1 - t0, time.perf_counter() - t1

    def _checkpoint(self, checkpoint: str, shipped: tuple[str, list] | None) -> str:
        """Where this worker's engine reads `checkpoint`: held in memory (live), its local copy
        (object_store) or the shared filesystem's path."""
        if shipped is not None and is_live(shipped[0]):
            self._hold_live(checkpoint, *shipped)
        elif shipped is not None:
            return str(self._local_copy(*shipped))
        elif not Path(checkpoint).is_dir():
            import socket

            raise ValueError(
                f"checkpoint {checkpoint} is not visible to the Ray rollout worker on {socket.gethostname()}: "
                "put the runs directory (TS_RUNS_DIR) on a filesystem every node mounts at the same path "
                "(docs/scaling.md)"
            )
        return checkpoint

    def run_group(
        self, jobs: list[tuple[str, Shard, tuple[str, list] | None]]
    ) -> tuple[list[list[Generation]], float, float]:
        """A shard group (sharding.shard_groups): each (checkpoint, shard, shipped) as in `run_shard`, all
        in one `generate_many` call, as LocalRollout.run_many calls it: the same numbers, bit for bit."""
        t0 = time.perf_counter()
        calls = [(self._checkpoint(ck, shipped), s.contexts, s.params, s.max_new) for ck, s, shipped in jobs]
        t1 = time.perf_counter()
        gens = self.engine.generate_many(calls)
        return gens, t1 - t0, time.perf_counter() - t1

    def close(self) -> None:
        """Free the engine and delete this worker's checkpoint copies (object_store)."""
        if hasattr(self.engine, "close"):
            self.engine.close()
        if self._copies_root is not None:
            shutil.rmtree(self._copies_root, ignore_errors=True)
            self._copies.clear()


class RayRolloutPool:
    """`workers` RolloutWorker actors on the connected cluster; `run` fans shards out over them."""

    def __init__(
        self, ray, initial_checkpoint: str | Path, cfg, workers: int, longest_prompt: int | None = None
    ) -> None:
        import torch

        self.ray = ray
        c = cfg.cluster
        self.retries = c.shard_retries
        # rollout.worker_gpus, or (unset) tied to the engine's device and tensor parallelism (config/placement.py)
        gpus = ray_worker_gpus(cfg, torch.cuda.device_count() if torch.cuda.is_available() else 0)
        opts = actor_options(ray, num_cpus=c.worker_cpus, num_gpus=gpus, restarts=max(1, self.retries))
        cls = ray.remote(RolloutWorker).options(**opts)
        self.actors = [cls.remote(str(initial_checkpoint), cfg, gpus, longest_prompt) for _ in range(workers)]
        self.object_store = c.weights == "object_store"
        # run_many: a shard group per worker call, stacked as this process's HF engine stacks it (sharding.py)
        self.batches_checkpoints = cfg.rollout.engine == "hf"
        self._shipped: OrderedDict[str, list] = OrderedDict()  # tag -> [ref]: put once per checkpoint
        self._live: OrderedDict[str, list] = OrderedDict()  # the same for policies held in memory
        self._live_keep = live_weights.keep_for(cfg.pipeline.max_staleness)
        self.retried = 0  # shards retried after their worker died (all calls)
        self.worker_seconds: dict[str, float] = {}  # summed over workers: weight_swap, generation
        try:
            wait_started(ray, self.actors, "rollout workers", c.start_timeout_s)
        except BaseException:
            self.close()
            raise

    def pids(self) -> list[int]:
        return self.ray.get([a.pid.remote() for a in self.actors])

    def nodes(self) -> list[str]:
        return self.ray.get([a.node.remote() for a in self.actors])

    def _put_once(self, refs: OrderedDict, tag: str, value, keep: int) -> tuple[str, list]:
        """(tag, [ref]) of `value()` in the object store, put there once; the `keep` newest stay."""
        if tag not in refs:
            refs[tag] = [self.ray.put(value())]
            while len(refs) > keep:
                refs.popitem(last=False)
        refs.move_to_end(tag)
        return tag, refs[tag]

    def _ship(self, checkpoint: Path) -> tuple[str, list]:
        """The checkpoint's files, put into the object store once."""
        return self._put_once(
            self._shipped, checkpoint_tag(checkpoint), lambda: checkpoint_files(checkpoint), KEEP_CHECKPOINTS
        )

    def _ship_live(self, live) -> tuple[str, list]:
        """A policy held in memory: its tensors on the host, put once (ray.put copies them, so an
        in-process trainer's next update, which changes them in place, does not reach the copy)."""
        return self._put_once(self._live, live_tag(live.policy_id), lambda: live_state(live), self._live_keep)

    def _shipped_for(self, checkpoint: Path, timer: TimerLike) -> tuple[str, list] | None:
        """How the workers get `checkpoint`: θ held in memory or (object_store) its files, put once; None:
        from the shared filesystem."""
        live = live_weights.lookup(checkpoint)
        if live is not None:  # θ from the trainer in memory: no file to share or copy
            with timer("weight_ship"):
                return self._ship_live(live)
        if self.object_store:
            with timer("weight_ship"):
                return self._ship(Path(checkpoint))
        return None

    def run_many(
        self, plans: list[tuple[Path, list[Shard]]], groups: list[list[tuple[int, int]]], timer: TimerLike = _no_timer
    ) -> list[list[list[Generation]]]:
        """Every shard of every (checkpoint, shards): each group of sharding.shard_groups on one worker in
        one engine call, the groups fanned out over the workers."""
        shipped = [self._shipped_for(ck, timer) for ck, _ in plans]
        units = [[(str(plans[p][0]), plans[p][1][i], shipped[p]) for p, i in g] for g in groups]
        with timer("generation"):
            outs, retried = fan_out(self.ray, self.actors, lambda a, u: a.run_group.remote(u), units, self.retries)
        self.retried += retried
        out: list[list] = [[None] * len(shards) for _, shards in plans]
        for group, (gens, swap_s, gen_s) in zip(groups, outs, strict=True):
            self._count(swap_s, gen_s)
            for (p, i), g in zip(group, gens, strict=True):
                out[p][i] = g
        return out

    def _count(self, swap_s: float, gen_s: float) -> None:
        self.worker_seconds["weight_swap"] = self.worker_seconds.get("weight_swap", 0.0) + swap_s
        self.worker_seconds["generation"] = self.worker_seconds.get("generation", 0.0) + gen_s

    def run(self, checkpoint: Path, shards: list[Shard], timer: TimerLike = _no_timer) -> list[list[Generation]]:
        shipped = self._shipped_for(checkpoint, timer)
        with timer("generation"):  # the fan-out's wall time; each worker's own swap/generation seconds below
            outs, retried = fan_out(
                self.ray,
                self.actors,
                lambda a, s: a.run_shard.remote(str(checkpoint), s, shipped),
                shards,
                self.retries,
            )
        self.retried += retried
        for _, swap_s, gen_s in outs:
            self._count(swap_s, gen_s)
        return [gens for gens, _, _ in outs]

    def close(self) -> None:
        """Let the workers clean up (their checkpoint copies), then kill them."""
        try:
            self.ray.get([a.close.remote() for a in self.actors], timeout=30)
        except Exception:  # a dead or hung worker: killing it is all that is left to do
            pass
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
