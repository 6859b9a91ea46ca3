"""Where θ_k lives between checkpoints, what it is, and how it comes back (`checkpoint.every`).

θ_k is on disk (`policy/step_k/`, with its AdamW state) only at checkpoint steps (`checkpoint_due`);
in between it exists in the trainer (train/resident.py) and, for sampling and evaluation, in this
process (transports/live_weights.py: the engine looks there first). Each policy has an identity that does
not depend on where it is:

    policy_id(0)   = the prepare manifest's digest
    policy_id(k+1) = a digest of update k's upstream digests (θ_k's writer and verify k)

so by the manifests' Merkle chain (store/manifest.py) the same θ always has the same id, and a
policy computed from anything different has another. A checkpoint records the id it was written
as (extra.policy_id); it is a valid base only while that id matches the run's manifests.

`chain_job` is the one way to reach θ_k: from what the trainer holds when that is θ_k or on the way
to it, else from the newest valid checkpoint c <= k, replaying updates c .. k-1 from the stored
rollouts (the Parquet record is the log: nothing is sampled again). A replayed update's metrics
digest is checked against what its manifest recorded (bit-identical on the CPU; a warning if not).

Memory hand-over (`memory_handoff`) needs an engine that loads weights from memory (the HF engine, or
vLLM's `reload_weights` from tensors; Ray rollout workers get the tensors through the object store) and a
trainer that keeps them (in process, or the persistent trainer; fsdp2 sends rank 0's gathered copy).
Elsewhere (LoRA steps, one launch per update) every step is checkpointed and read from its file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from thinking_seeds.config import RunConfig
from thinking_seeds.pipeline.graph import upstream_of
from thinking_seeds.pipeline.run_resources import all_resources, held_resources, resources_for
from thinking_seeds.store.checkpoints import CheckpointError, list_checkpoints, verified
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.transports import live_weights

log = logging.getLogger(__name__)


def memory_handoff(cfg: RunConfig) -> bool:
    """Whether θ goes from trainer to engine in memory (else every step is written and read as a file)."""
    return (
        cfg.update.launcher in ("in_process", "accelerate")
        # cluster=ray: the driver ships θ's tensors to the rollout workers (engine/ray_workers.py)
        and cfg.rollout.engine in ("hf", "vllm")  # vllm: reload_weights(weights_iterator=...), engine/vllm_engine.py
        # fsdp2 too: each update gathers θ's shards to rank 0 (strategy.gathered), which sends that copy
        and cfg.model.lora is None
    )


def publish_policy(run: RunDir, cfg: RunConfig, step: int, state: dict) -> None:
    """Hold θ_step's tensors for the engine; in process they are the trainer's own (borrowed)."""
    borrowed = cfg.update.launcher == "in_process"
    keep = live_weights.keep_for(cfg.pipeline.max_staleness)  # how many policies this process holds in memory
    live_weights.publish(run.policy(step), policy_id(run, step), state, borrowed=borrowed, keep=keep)


def policy_at_hand(run: RunDir, cfg: RunConfig, step: int) -> bool:
    """Whether θ_step can reach the engine without the trainer (in memory, or a valid checkpoint): what
    sampling beside a running update may rely on (a replay would need the busy trainer)."""
    if not memory_handoff(cfg):
        return (run.policy(step) / "manifest.json").is_file()
    pid = policy_id(run, step)
    live = live_weights.lookup(run.policy(step))
    return (live is not None and live.policy_id == pid) or valid_checkpoint(run, step, pid)


def checkpoint_due(cfg: RunConfig, step: int) -> bool:
    """Whether θ_step is written to policy/step_<step>/: every checkpoint.every steps, the end of the
    run, every pool snapshot (the pool's snapshots link its files) -- every step without hand-over."""
    if not memory_handoff(cfg) or step in (0, cfg.iterations):
        return True
    return step % cfg.checkpoint.every == 0 or step % cfg.pool.snapshot_every == 0


def policy_id(run: RunDir, step: int) -> str:
    """θ_step's identity, from the current manifests (see the module docstring)."""
    if step == 0:
        m = run.read_manifest(0, "prepare")
        return "prepare:" + (m.digest if m is not None else "missing")
    up = run.upstream_digests(upstream_of("update", step - 1))
    return hashlib.sha256(json.dumps(up, sort_keys=True).encode()).hexdigest()[:16]


def valid_checkpoint(run: RunDir, step: int, pid: str | None = None) -> bool:
    """Whether policy/step_<step>/ is complete and is this run's θ_step (its id, or, in a run written
    before ids, the file its update manifest recorded)."""
    d = run.policy(step)
    if not (d / "manifest.json").is_file():
        return False
    try:
        info = verified(d)
    except CheckpointError:
        return False
    if step == 0:
        return True
    if info.extra.get("policy_id") == (pid or policy_id(run, step)):
        return True
    m = run.read_manifest(step - 1, "update")
    if m is None and "policy_id" not in info.extra:
        # Written outside the update chain (the SFT control's steps, a run imported from elsewhere):
        # no update computed it, so there is nothing to replay it from; its own hashes vouch for it.
        return True
    return m is not None and m.hashes.get("policy") == run.file_hash(d)


def checkpoint_steps(run: RunDir) -> list[int]:
    """The policy steps with a complete checkpoint on disk."""
    return [c.step for c in list_checkpoints(run.policy_root)]


def update_output_ok(run: RunDir, m: Manifest, k: int) -> bool:
    """Whether a completed update k also left its background-written checkpoint (if one was due): a
    kill during the write leaves the manifest without θ_{k+1} on disk, and the update is redone."""
    if "policy" not in m.outputs or "policy" in m.hashes:
        return True  # no checkpoint due, or one written before the manifest (checked by RunDir.completed)
    from thinking_seeds.store.retention import is_pruned

    return is_pruned(run.policy(k + 1)) or valid_checkpoint(run, k + 1)


def chain_job(run: RunDir, cfg: RunConfig, target: int, held: str | None, update: bool) -> dict:
    """The trainer job that reaches θ_target (update=True: then runs update `target`, -> θ_{target+1})."""
    ref = run.policy(0) if cfg.loss.kl_coef > 0 else None
    job: dict = {"op": "update", "config": str(run.config_path), "ref": str(ref) if ref else None}
    job["out_root"] = str(run.policy_root)
    ids = {target: policy_id(run, target)}
    base = target
    if held != ids[target]:  # not holding θ_target: from the newest valid checkpoint, replaying since
        while base > 0 and not valid_checkpoint(run, base, ids[base]):
            base -= 1
            ids[base] = policy_id(run, base)
    chain = []
    for j in range(base, target):
        m = run.read_manifest(j, "update")
        expect = (m.hashes.get("update") if m is not None else None) or ""
        chain.append({"step": j + 1, "rollouts": str(run.rollouts(j)), "policy_id": ids[j + 1], "expect": expect})
    if update:
        nxt = policy_id(run, target + 1)
        chain.append({"step": target + 1, "rollouts": str(run.rollouts(target)), "policy_id": nxt, "expect": None})
    job.update(base=str(run.policy(base)), base_id=ids[base], chain=chain)
    return job


def run_job(run: RunDir, cfg: RunConfig, job: dict, what: str) -> dict:
    """A chain job in this process's resident trainer or the run's persistent one: {"metrics",
    "replayed", "weights" (with handoff: θ's tensors)}. Replayed updates are checked here."""
    if cfg.update.launcher == "in_process":
        res = resident(run)
        metrics, replayed = res.run(job, res.plan(job))
        answer = {"metrics": metrics, "replayed": replayed}
        if job.get("handoff"):
            answer["weights"] = res.weights()  # the trainer's own tensors: no copy
    else:
        from thinking_seeds.pipeline.trainer_client import persistent_job, trainer_for

        t = trainer_for(run, cfg)
        t.held_id = None  # until it answers: a failed job leaves it holding who knows what
        answer = persistent_job(run, cfg, job, what)
        answer["replayed"] = {int(k): v for k, v in answer.get("replayed", {}).items()}
        t.held_id = job["chain"][-1]["policy_id"] if job["chain"] else job["base_id"]
    expect = {st["step"]: st["expect"] for st in job["chain"] if st["expect"]}
    bad = sorted(s for s, d in answer["replayed"].items() if s in expect and expect[s] != d)
    if bad:
        log.warning("replayed updates to θ_%s differ from what their manifests recorded (GPU non-determinism?)", bad)
    answer["metrics"]["checkpoint/replayed"] = float(len(answer["replayed"]))
    answer["metrics"]["checkpoint/replay_mismatch"] = float(len(bad))
    return answer


def held_policy(run: RunDir, cfg: RunConfig) -> str | None:
    """The id of the policy this process's trainer holds (None: nothing known)."""
    if cfg.update.launcher == "in_process":
        held = held_resources(run)
        res = held.resident if held is not None else None
        return res.held[0] if res is not None and res.held is not None else None
    from thinking_seeds.pipeline.trainer_client import held_trainer

    t = held_trainer(run, cfg)
    return t.held_id if t is not None else None


def resident(run: RunDir):
    """This process's in-process trainer state for the run (update.launcher=in_process)."""
    from thinking_seeds.train.resident import Resident  # torch training code: only when used

    mine = resources_for(run)
    if mine.resident is None:
        for other in all_resources():  # one run at a time holds a model and AdamW
            if other is not mine and other.resident is not None:
                res, other.resident = other.resident, None
                res.flush()
        mine.resident = Resident()
    return mine.resident


def ensure_policy(run: RunDir, cfg: RunConfig, step: int) -> Path:
    """θ_step's path for the engine, with its weights in memory if they are not on disk (replayed by
    the trainer when this process has neither: a resumed run)."""
    path = run.policy(step)
    if not memory_handoff(cfg):
        return path
    pid = policy_id(run, step)
    live = live_weights.lookup(path)
    if live is not None and live.policy_id == pid:
        return path
    live_weights.drop(path)  # stale: the engine must not take it for θ_step
    if valid_checkpoint(run, step, pid):
        return path
    if not run.owns_lock():
        raise ValueError(
            f"policy step {step} of run {run.run_id} has no checkpoint (checkpoint.every={cfg.checkpoint.every}); "
            f"steps with one: {checkpoint_steps(run)}"
        )
    job = chain_job(run, cfg, step, held_policy(run, cfg), update=False)
    job["handoff"] = True
    if cfg.update.launcher == "in_process":
        live_weights.drop_borrowed(run.root)  # the replay changes the trainer's tensors in place
    answer = run_job(run, cfg, job, f"replay to θ_{step}")
    publish_policy(run, cfg, step, answer["weights"])
    return path


def flush_checkpoints(run: RunDir, cfg: RunConfig) -> None:
    """Wait until the checkpoint being written in the background (if any) is on disk (raise its error),
    then apply checkpoint.keep_last to it."""
    if cfg.update.launcher == "in_process":
        held = held_resources(run)
        if held is not None and held.resident is not None:
            held.resident.flush()
    else:
        from thinking_seeds.pipeline.trainer_client import flush_trainer

        flush_trainer(run, cfg)
    prune_checkpoints(run, cfg)


def prune_checkpoints(run: RunDir, cfg: RunConfig) -> list[int]:
    """checkpoint.keep_last relative to the newest complete checkpoint (store/retention.py): that one,
    the base of any replay, is always kept."""
    keep = cfg.checkpoint
    if keep.keep_last is None:
        return []
    from thinking_seeds.store.retention import prune_policies

    newest = max(checkpoint_steps(run), default=0)
    return prune_policies(run.policy_root, newest, keep.keep_last, keep.keep_every, run.file_hash)


def forget_run(run: RunDir) -> None:
    """Drop this process's in-memory policies of the run (after flushing its checkpoint)."""
    held = held_resources(run)
    if held is not None:
        held.forget_policies()
    else:
        live_weights.clear(run.root)
