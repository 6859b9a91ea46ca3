"""What the stages of one process share: the run's config, prompts, tokenizer, engine, verifier,
trackers, and a timer (and a mean) for the stage's metrics.

The engine is held by the run (RunResources, pipeline/run_resources.py), not by a Session: the stages of
a Prefect flow run as tasks, each with its own Session, and loading the model once per stage would
dominate a small run. Each stage only swaps the weights it needs into the run's engine
(`Session.use_weights`); the run's close stops it.

The seeds and continuation stages generate through `Session.generate`: their requests are cut into
shards (engine/sharding.py) that this process's engine runs one after the other (cluster=local), or
that rollout.workers Ray actors run (cluster=ray; engine/ray_workers.py): the same samples either way.
With cluster=ray the verifier is reward.workers Ray actors too (data/ray_pool.py); the Ray pools are
held by the run like the engine, as are the local verifier's worker processes, the run's trackers and
the flow's shared Session (`session_for`). Evaluation always samples with this process's engine.
"""

from __future__ import annotations

import functools
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from thinking_seeds.config import RunConfig, load_saved_config
from thinking_seeds.data.builtin_tasks import BUILTIN_TASKS
from thinking_seeds.data.rewards import Verifier
from thinking_seeds.data.sources import Prompt, load_dataset
from thinking_seeds.engine.rollout import Generation, SamplingParams
from thinking_seeds.engine.sharding import Call, LocalRollout, build_engine, generate_sharded, generate_sharded_many
from thinking_seeds.pipeline.run_resources import (
    VERIFIER_KIND,
    at_exit_last,
    hold,
    resources_for,
    shared_session,
    stop_everywhere,
)
from thinking_seeds.store.checkpoints import CheckpointInfo, list_checkpoints
from thinking_seeds.store.historical_pool import HistoricalPool
from thinking_seeds.store.run_dir import RunDir


@dataclass
class Timer:
    """Seconds per named part of a stage (`with t("generation"): ...`), summed over repeats."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t


def mean(xs) -> float:
    """The mean of a stage metric's values; nan when there are none (an on-policy run has no seeds)."""
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def close_ray_pools() -> None:
    """Stop every run's Ray worker actors in this process (they die with the driver anyway)."""
    stop_everywhere("ray_rollout")
    stop_everywhere("ray_verify")


def _close(obj, at_once: bool) -> None:
    if hasattr(obj, "close"):  # vLLM frees its KV cache (HFEngine: garbage, with the run's references)
        obj.close()


class Session:
    """Shared, lazily loaded state for the stages of one process: config, prompts, engine, verifier.

    The plain loop keeps one Session for the whole run; a Prefect flow's tasks share one per run
    (`session_for`), and the engine the run holds gives one model load per run (weights swapped in place).
    """

    def __init__(self, run: RunDir, cfg: RunConfig | None = None):
        self.run = run
        self.cfg = cfg or load_saved_config(run.config_path)
        self._tokenizer = None
        self._prompts: dict[str, list[Prompt]] = {}

    # -- lazily built resources -----------------------------------------------------------
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.run.policy(0), local_files_only=True)
            self._tokenizer.padding_side = "left"
        return self._tokenizer

    def engine(self, timer: Timer | None = None):
        """The run's engine, asked of the run at every use rather than kept: another run in this process may
        have stopped it (one engine per process), and then this run's next stage loads a fresh one."""
        key = (
            self.cfg.rollout.engine,
            self.cfg.engine_dtype,
            self.cfg.device,
            self.cfg.rollout.batch_size,
            self.cfg.pool.size if self._lora_requests else None,  # vLLM's LoRA slots
        )

        def load():
            with (timer or Timer())("model_load"):
                longest = self.longest_prompt() if self.cfg.rollout.engine == "vllm" else None  # max_model_len
                return build_engine(self.run.policy(0), self.cfg, longest_prompt=longest)

        # One engine per process (run_resources.ONE_PER_PROCESS): a run's first stage stops the last run's
        # before its own starts (vLLM holds its KV cache until closed, and closing an in-process vLLM engine
        # tears down the process's distributed state, which a newer engine would be using).
        return hold(self.run, "engine", key, load, _close)

    @property
    def _lora_requests(self) -> bool:
        """Whether the engine serves LoRA steps as adapters per request (vLLM; rollout.lora_requests)."""
        c = self.cfg
        return c.model.lora is not None and c.rollout.engine == "vllm" and c.rollout.lora_requests

    def longest_prompt(self) -> int | None:
        """Tokens in the longest prompt of the run's splits (chat template applied, as the stages encode
        them); None when the run has no data yet."""
        from thinking_seeds.engine.models import encode_prompt

        lengths = [
            len(encode_prompt(self.tokenizer, p.chat()))
            for split in ("train", "validation", "test")
            if (self.run.data_dir / f"{split}.parquet").is_file()
            for p in self.prompts(split)
        ]
        return max(lengths, default=None)

    def policy(self, step: int) -> Path:
        """θ_step for the engine: its checkpoint's path, whose weights the engine takes from memory when
        the trainer handed them over (pipeline/policy_chain.py), replayed if neither is here."""
        from thinking_seeds.pipeline.policy_chain import ensure_policy

        return ensure_policy(self.run, self.cfg, step)

    def use_weights(self, ckpt: Path, timer: Timer | None = None) -> None:
        eng = self.engine(timer)
        with (timer or Timer())("weight_swap"):
            eng.load_weights(ckpt)

    def generate(
        self,
        checkpoint: Path,
        contexts: list[list[int]],
        params: SamplingParams,
        max_new: list[int] | None = None,
        timer: Timer | None = None,
    ) -> list[Generation]:
        """One sample per context under the weights at `checkpoint`, in order, shard by shard
        (rollout.batch_size requests each, own seeds): on this process's engine, or on the Ray workers."""
        t = timer or Timer()
        if not contexts:
            return []
        if self.cfg.cluster.kind == "ray":
            pool = self.rollout_pool()
            before = dict(pool.worker_seconds)
            out = generate_sharded(pool, checkpoint, contexts, params, max_new, self.cfg.rollout.batch_size, t)
            self._add_worker_seconds(pool, before, t)
            return out
        runner = LocalRollout(self.engine(t))
        return generate_sharded(runner, checkpoint, contexts, params, max_new, self.cfg.rollout.batch_size, t)

    def generate_many(
        self, calls: list[Call], timer: Timer | None = None, keys: list | None = None
    ) -> list[list[Generation]]:
        """`[self.generate(*call) for call in calls]`, each call under its own checkpoint, the same shards
        and seeds; each group of shards (shard i of every call) in one engine call when the engine samples
        several checkpoints at once (the HF engine's stacked weights; vLLM with LoRA adapters per request,
        rollout.lora_requests), else one weight swap and call per checkpoint; on this process's engine or,
        the same groups, on the Ray workers (engine/sharding.py). `keys`: only calls of one key share a group."""
        t = timer or Timer()
        size = self.cfg.rollout.batch_size
        if self.cfg.cluster.kind != "ray":
            # The local runner knows whether its engine batches checkpoints (LocalRollout.batches_checkpoints).
            return generate_sharded_many(LocalRollout(self.engine(t)), calls, size, t, keys)
        pool = self.rollout_pool()
        before = dict(pool.worker_seconds)
        out = generate_sharded_many(pool, calls, size, t, keys)
        self._add_worker_seconds(pool, before, t)
        return out

    @staticmethod
    def _add_worker_seconds(pool, before: dict[str, float], t: Timer) -> None:
        """The Ray workers' own seconds (weight swaps, generation) since `before`, summed over workers."""
        for name, sec in pool.worker_seconds.items():
            t.seconds[f"workers_{name}"] = t.seconds.get(f"workers_{name}", 0.0) + sec - before.get(name, 0.0)

    def rollout_pool(self):
        """This process's Ray rollout workers for this run (cluster=ray), started on first use."""
        from thinking_seeds.data.ray_pool import connect
        from thinking_seeds.engine.ray_workers import RayRolloutPool

        c, r = self.cfg.cluster, self.cfg.rollout
        ray = connect(c.address)
        key = (r.engine, self.cfg.engine_dtype, self.cfg.device, r.batch_size, r.workers)
        key += (r.worker_gpus, r.tensor_parallel_size)
        key += (c.worker_cpus, c.shard_retries, c.weights, self.cfg.pool.size if self._lora_requests else None)
        longest = self.longest_prompt() if r.engine == "vllm" else None
        make = functools.partial(RayRolloutPool, ray, self.run.policy(0), self.cfg, r.workers, longest_prompt=longest)
        return hold(self.run, "ray_rollout", key, make, _close)

    @property
    def verifier(self) -> Verifier:
        # One per run, shared by its stages and sessions: starting a pool spawns interpreters that import
        # math-verify and sympy (~0.6 s, seconds on a loaded machine), most of a stage's verification time.
        r = self.cfg.reward
        settings = (r.backend, r.partial_credit, r.fn, r.timeout_s, r.workers)
        if self.cfg.cluster.kind != "ray":
            return run_verifier(self.run, *settings)
        from thinking_seeds.data.ray_pool import RayVerifier, connect

        c = self.cfg.cluster
        ray = connect(c.address)
        make = functools.partial(RayVerifier, ray, *settings, c.shard_retries, c.worker_cpus, c.start_timeout_s)
        return hold(self.run, "ray_verify", (*settings, c.worker_cpus, c.shard_retries), make, _close)

    def label(self):
        """The task's solution label for diversity metrics (None: chain_sum's strategy share)."""
        src = self.cfg.data.source
        return BUILTIN_TASKS[src].label if src in BUILTIN_TASKS and src != "chain_sum" else None

    def prompts(self, split: str) -> list[Prompt]:
        if split not in self._prompts:
            self._prompts[split] = load_dataset(self.run.data_dir / f"{split}.parquet")
        return self._prompts[split]

    def iteration_prompts(self, k: int) -> list[Prompt]:
        """The prompts of iteration k: a seeded draw without replacement, same for every method."""
        train = self.prompts("train")
        n = min(self.cfg.rollout.prompts_per_iteration, len(train))
        rng = random.Random(f"{self.cfg.data.seed}/{self.cfg.seed}/prompts/{k}")
        return rng.sample(train, n)

    def pool_members(self, k: int) -> tuple[HistoricalPool, list[CheckpointInfo]]:
        """The historical pool H at iteration k: its picking rule and the snapshots it may pick."""
        pool = HistoricalPool(self.cfg.pool.size, self.cfg.pool.include_initial, self.cfg.pool.pick)
        return pool, pool.members(list_checkpoints(self.run.pool_root), current_step=k)

    @property
    def tracker(self):
        """The run's experiment trackers (`logger`), one per run and process (None: console only)."""
        if self.cfg.logger == ["console"] or not self.cfg.logger:
            return None
        res = resources_for(self.run)
        if res.tracker is None:
            from thinking_seeds.store.tracking import Tracker

            res.tracker = Tracker(self.cfg.logger, self.run.root, self.run.run_id, self.cfg.model_dump(mode="json"))
            at_exit_last()  # the trackers are flushed at exit before the trackers' own libraries shut down
        return res.tracker

    def close(self) -> None:
        """Let go of what this Session read (tokenizer, prompts); the engine is the run's, stopped at its close."""
        self._tokenizer = None
        self._prompts.clear()


def session_for(run: RunDir) -> Session:
    """This process's Session over `run`, built once: a Prefect flow's stage tasks share it as the plain
    loop's stages share theirs (config, prompts and tokenizer read once, not once per task: ~0.1 s an
    iteration on the tiny preset, bench/orchestration.py). A changed config.yaml builds a new one."""
    st = run.config_path.stat()
    return shared_session(run, (st.st_mtime_ns, st.st_size), lambda: Session(run))


def run_verifier(
    run: RunDir, backend, partial_credit: bool, fn: str | None, timeout_s: float, workers: int
) -> Verifier:
    """The run's local Verifier with these settings, its worker pool started on first use and stopped with
    the run. One per settings: the rewards' and the majority vote's (math-verify's answer equivalence) are
    one pool when the run's reward is math-verify's."""
    key = (backend, partial_credit, fn, timeout_s, workers)
    make = functools.partial(
        Verifier, backend=backend, partial_credit=partial_credit, fn=fn, timeout_s=timeout_s, workers=workers
    )
    return hold(run, f"{VERIFIER_KIND}{key}", key, make, lambda v, at_once: v.kill_pool())
