"""update k: θ_k + rollouts -> θ_{k+1} with the loss of docs/algorithm.md §3, in this process, in the run's
persistent trainer (one `accelerate launch` per run: pipeline/trainer_client.py) or through one
`accelerate launch` per update (the same trainer code every way; the same files and manifest)."""

from __future__ import annotations

from thinking_seeds.pipeline.session import Session, Timer
from thinking_seeds.pipeline.update_launcher import launch_update
from thinking_seeds.store.checkpoints import verify_checkpoint
from thinking_seeds.store.manifest import Manifest


def update(s: Session, k: int) -> Manifest:
    cfg, run = s.cfg, s.run
    m = Manifest("update", k, cfg.config_hash())
    t = Timer()
    ref = run.policy(0) if cfg.loss.kl_coef > 0 else None
    if cfg.update.launcher == "in_process":
        from thinking_seeds.train.trainer import run_update  # torch training code: only when used here

        with t("update_total"):
            metrics = run_update(run.policy(k), run.rollouts(k), run.policy_root, k + 1, cfg, ref_dir=ref)
    elif cfg.update.launcher == "accelerate":
        from thinking_seeds.pipeline.trainer_client import persistent_update

        with t("update_total"):
            metrics = persistent_update(run, cfg, k, ref)
    else:
        # The launcher's hand-over file sits with the manifests; `ts check` knows to skip it.
        metrics_path = run.manifest_path(k, "update_metrics")
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        with t("update_total"):
            metrics = launch_update(run, cfg, k, metrics_path, ref)
    out = run.policy(k + 1)
    verify_checkpoint(out)
    m.record(run, "policy", out)
    if cfg.checkpoint.keep_last is not None:  # after θ_{k+1} is safe: older steps may go
        from thinking_seeds.store.retention import prune_policies

        keep = cfg.checkpoint
        pruned = prune_policies(run.policy_root, k + 1, keep.keep_last, keep.keep_every, run.file_hash)
        metrics["checkpoint/pruned"] = float(len(pruned))
    m.metrics = metrics
    m.seconds = t.seconds
    return m
