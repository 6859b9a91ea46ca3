"""update k: θ_k + rollouts -> θ_{k+1} with the loss of docs/algorithm.md §3, in this process, in the run's
persistent trainer (one `accelerate launch` per run: pipeline/trainer_client.py) or through one
`accelerate launch` per update (the same trainer code every way).

θ_{k+1} stays in the trainer and comes to this process's engine in memory (pipeline/policy_chain.py);
it is written to policy/step_<k+1>/ with its AdamW state only when a checkpoint is due
(`checkpoint.every`, the end, pool snapshots), from a CPU copy in the background. The manifest
records the update's metrics digest ("update": what the next stages chain on) and, at a checkpoint
step, the checkpoint's path (a kill before the write ends makes resume redo this update)."""

from __future__ import annotations

from thinking_seeds.engine.models import release_cached_memory, resolve_device
from thinking_seeds.pipeline.policy_chain import (
    chain_job,
    checkpoint_due,
    held_policy,
    memory_handoff,
    prune_checkpoints,
    publish_policy,
    run_job,
)
from thinking_seeds.pipeline.session import Session, Timer
from thinking_seeds.pipeline.update_launcher import launch_update
from thinking_seeds.store.checkpoints import verify_checkpoint
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.transports import live_weights


def update(s: Session, k: int) -> Manifest:
    from thinking_seeds.train.resident import metrics_digest

    cfg, run = s.cfg, s.run
    m = Manifest("update", k, cfg.config_hash())
    t = Timer()
    out = run.policy(k + 1)
    handoff = memory_handoff(cfg)
    # The run's last checkpoint is written in place: nothing follows that a background write could
    # overlap, and the CPU copy a background write takes would double the trainer's memory at the end.
    background = handoff and k + 1 < cfg.iterations
    save = ("background" if background else "sync") if checkpoint_due(cfg, k + 1) else None
    release_cached_memory(resolve_device(cfg.device))  # what generation left cached, for the trainer's peak
    if cfg.update.launcher == "accelerate_per_update":
        # The launcher's hand-over file sits with the manifests; `ts check` knows to skip it.
        metrics_path = run.manifest_path(k, "update_metrics")
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        ref = run.policy(0) if cfg.loss.kl_coef > 0 else None
        with t("update_total"):
            metrics = launch_update(run, cfg, k, metrics_path, ref)
    else:
        job = chain_job(run, cfg, k, held_policy(run, cfg), update=True)
        job.update(save=save, handoff=handoff)
        if cfg.update.launcher == "in_process":
            live_weights.drop_borrowed(run.root)  # the trainer's own tensors, which this update changes
        with t("update_total"):
            answer = run_job(run, cfg, job, f"update of iteration {k}")
        metrics = answer["metrics"]
        if handoff:
            publish_policy(run, cfg, k + 1, answer["weights"])
    if save == "sync":
        verify_checkpoint(out)
        m.record(run, "policy", out)
    elif save == "background":
        m.outputs["policy"] = run.rel(out)  # no hash: the write may still run (policy_chain.update_output_ok)
    m.hashes["update"] = metrics_digest(metrics)
    if cfg.checkpoint.keep_last is not None:  # relative to the newest complete checkpoint: older steps may go
        metrics["checkpoint/pruned"] = float(len(prune_checkpoints(run, cfg)))
    m.metrics = metrics
    m.seconds = t.seconds
    return m
