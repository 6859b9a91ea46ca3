"""snapshot k: every `pool.snapshot_every` iterations θ_k joins the historical pool H (docs/algorithm.md §2.1)."""

from __future__ import annotations

from thinking_seeds.pipeline.policy_chain import flush_checkpoints
from thinking_seeds.pipeline.session import Session, Timer
from thinking_seeds.store.checkpoints import snapshot_checkpoint, verify_checkpoint
from thinking_seeds.store.manifest import Manifest


def snapshot(s: Session, k: int) -> Manifest:
    """θ_k joins H when k is a snapshot iteration; it is historical from k+1 on."""
    cfg, run = s.cfg, s.run
    m = Manifest("snapshot", k, cfg.config_hash())
    t = Timer()
    if k % cfg.pool.snapshot_every == 0:
        dst = run.pool_root / f"step_{k:06d}"
        if not (dst / "manifest.json").exists():
            with t("checkpoint_wait"):  # θ_k's checkpoint (always due at a snapshot) may still be written
                flush_checkpoints(run, cfg)
            with t("io"):
                snapshot_checkpoint(run.policy(k), run.pool_root, k, extra={"iteration": k})
        verify_checkpoint(dst)
        m.record(run, "checkpoint", dst)
    m.seconds = t.seconds
    return m
