"""θ kept by the trainer between updates, named by its lineage, and the checkpoints written from it.

One `Resident` holds the training state (model + AdamW, `trainer.TrainState`) of a run: in the
pipeline's process (update.launcher=in_process) or in the persistent trainer
(train/trainer_server.py). A job names the policy it wants by a chain of updates from a checkpoint:

    {"op": "update", "config", "ref", "base": policy/step_c, "base_id": id of θ_c,
     "chain": [{"step": j+1, "rollouts": rollouts of iteration j, "policy_id": id of θ_{j+1},
                "expect": metrics digest recorded by update j, or None for the update to do now}, ...],
     "save": None | "sync" | "background", "out_root": policy/}

The resident starts from what it holds when that is θ_c or a policy of the chain (the usual case:
it holds θ_k and the chain is the one update k), else it loads θ_c (with its AdamW state) and
replays the chain's updates from their stored rollouts: the update is a deterministic function of
θ_c, its optimizer state and the rollouts (its generator is seeded per step), so a replay gives
the very θ_k (bit for bit on the CPU; `expect` lets the caller check it). Identities are digests of
the run's manifests (pipeline/policy_chain.py), the same for the same θ however it was reached.

Checkpoints: with "save", θ of the chain's end is written to `out_root/step_N` with its AdamW state
and its identity (extra.policy_id); "background" writes it from a CPU copy in a thread, off the
critical path, after the previous write has finished (one at a time, in order).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import torch

from thinking_seeds.config import load_saved_config
from thinking_seeds.store.checkpoints import FrozenModel, save_checkpoint
from thinking_seeds.store.optimizer_state import snapshot_optimizer
from thinking_seeds.train.trainer import TrainState, load_state, update_state

__all__ = ["CheckpointWriter", "Resident", "metrics_digest"]


def metrics_digest(metrics: dict) -> str:
    """A digest of what an update computed (losses, norms, ratios; timings left out): the update
    manifest's record of θ_{k+1} when no file is written, and the check that a replay repeated it."""
    kept = {k: float(v) for k, v in metrics.items() if not k.startswith(("perf/", "checkpoint/"))}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


class CheckpointWriter:
    """Checkpoints written one at a time in a background thread; an error surfaces at the next call."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def wait(self) -> None:
        """Wait for the write in progress (if any); raise its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def submit(self, write, background: bool) -> None:
        self.wait()  # the next checkpoint waits for the previous one
        if not background:
            write()
            return

        def run() -> None:
            try:
                write()
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = e

        self._thread = threading.Thread(target=run, name="checkpoint-writer", daemon=True)
        self._thread.start()


class Resident:
    """The trainer's θ between jobs, the identity of what it holds, and its checkpoint writer."""

    def __init__(self, accelerator=None) -> None:
        self.acc = accelerator
        self.state: TrainState | None = None
        self.held: tuple[str, str, str | None] | None = None  # (policy id, config hash, ref)
        self.writer = CheckpointWriter()

    @property
    def main(self) -> bool:
        return self.acc is None or self.acc.is_main_process

    def plan(self, job: dict) -> int:
        """Where the job starts in its chain: -1 = load the base first, i = after the chain's i-th step."""
        cfg_hash = load_saved_config(Path(job["config"]), check_outside=False).config_hash()
        if self.state is None or self.held is None or self.held[1:] != (cfg_hash, job.get("ref")):
            return -1
        chain = job["chain"]
        # An update to do now must be done now: holding its result already means an earlier answer
        # got lost, so start over rather than answer without metrics.
        last = len(chain) - (1 if chain and chain[-1]["expect"] is None else 0)
        for i in range(last - 1, -1, -1):
            if chain[i]["policy_id"] == self.held[0]:
                return i + 1
        return 0 if self.held[0] == job["base_id"] else -1

    def run(self, job: dict, start: int) -> tuple[dict, dict[int, str]]:
        """Reach the chain's end from `start` (see plan); (metrics of the update done now, {step: digest}
        of every replayed update), and the checkpoint of the end written or submitted."""
        cfg = load_saved_config(Path(job["config"]), check_outside=False)
        ref = Path(job["ref"]) if job.get("ref") else None
        reloaded = start < 0
        if reloaded:
            self.state = self.held = None
            if self.acc is not None:
                self.acc.free_memory()  # drop the last state's DDP wrapper and optimizer references
            self.state = load_state(Path(job["base"]), cfg, ref, self.acc)
            self.held = (job["base_id"], cfg.config_hash(), job.get("ref"))
            start = 0
        metrics: dict = {}
        replayed: dict[int, str] = {}
        for st in job["chain"][start:]:
            self.held = None  # mid-update the state is no policy of the chain
            # fsdp2 gathers to rank 0 only for the chain's end: AdamW too when it is saved (strategy.gathered)
            last = st is job["chain"][-1]
            save, handoff = last and bool(job.get("save")), last and bool(job.get("handoff"))
            m = update_state(
                self.state, Path(st["rollouts"]), None, st["step"], cfg, self.acc, keep=True, save=save, handoff=handoff
            )
            self.held = (st["policy_id"], cfg.config_hash(), job.get("ref"))
            if st["expect"] is None:
                metrics = m
            else:
                replayed[st["step"]] = metrics_digest(m)
        if metrics and self.main:
            metrics["perf/replayed_updates"] = float(len(replayed))
            metrics["perf/trainer_reloaded"] = float(reloaded)
        if job.get("save") and job["chain"] and self.main:
            self.save(job, cfg, metrics)
        return metrics, replayed

    def save(self, job: dict, cfg, metrics: dict) -> None:
        """θ of the chain's end (with its AdamW state) to out_root/step_N, from CPU copies taken now."""
        t0 = time.perf_counter()
        st, step = self.state, job["chain"][-1]["step"]
        # A copy: the caller goes on adding to `metrics` while the background thread writes `extra`.
        extra = {"metrics": dict(metrics), "config_hash": cfg.config_hash(), "policy_id": self.held[0]}
        self.writer.wait()  # the copies are taken after the previous write: at most one set in memory
        # fsdp2: the shards gathered by the update into one CPU copy (TrainState.gathered); ddp: the model
        whole, opt = st.gathered or (st.model, st.optimizer)
        if job["save"] != "background":  # written now, from the model itself (LoRA adapters too)
            whole.eval()
            whole.config.use_cache = True
            try:
                save_checkpoint(whole, st.tok, Path(job["out_root"]), step, extra, optimizer=opt, overwrite=True)
            finally:
                whole.train()
                whole.config.use_cache = False
            metrics["perf/save_s"] = time.perf_counter() - t0  # on the critical path
            return
        model, optimizer = FrozenModel(whole), snapshot_optimizer(opt)
        tok, root = st.tok, Path(job["out_root"])
        self.writer.submit(
            lambda: save_checkpoint(model, tok, root, step, extra, optimizer=optimizer, overwrite=True), background=True
        )
        metrics["perf/save_s"] = time.perf_counter() - t0  # the wait for the last write and the CPU copies

    def weights(self, dtype: torch.dtype | None = None) -> dict:
        """The held θ's tensors (the trainer's own, not a copy: the next update changes them in place);
        fsdp2: rank 0's unsharded CPU copy that the update gathered (TrainState.gathered), the same
        tensors a checkpoint of this step is written from. `dtype` (the engine's, for a hand-over to
        another process): floating tensors cast to it where they differ, on their own device, so fp32
        masters under update.mixed_precision=bf16 cross the socket as bf16, half the bytes."""
        whole = (self.state.gathered or (None, None))[0]
        state = (self.state.model if whole is None else whole).state_dict()
        if dtype is None:
            return state
        return {k: t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t for k, t in state.items()}

    def flush(self) -> None:
        self.writer.wait()
