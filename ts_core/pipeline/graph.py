"""The stage graph of one iteration (docs/algorithm.md §2): the stages in order, what each reads, when the
evaluation is due, and the sampling seed of each (iteration, stage).

    prepare          config.yaml, data splits, θ_0                      (once per run)
    snapshot     k   θ_k enters the historical pool H every `pool.snapshot_every` iterations
    seeds        k   pool checkpoints write drafts; cut at λ·|z|; prefixes.parquet
    continuation k   θ_k samples on-policy responses and continues every seed; generated.parquet
    verify       k   math-verify rewards, statuses, group advantages; rollouts.parquet
    update       k   loss of docs/algorithm.md §3 on the rollouts -> θ_{k+1}
    evaluate     k   held-out accuracy / pass@k of θ_{k+1} (every `eval.every` iterations)

Pure functions of the config: the plain loop, the Prefect flow and the CLI read them without
loading a model.
"""

from __future__ import annotations

import hashlib

from thinking_seeds.config import RunConfig

STAGES = ("snapshot", "seeds", "continuation", "verify", "update", "evaluate")


def policy_writer(step: int) -> tuple[str, int]:
    """The stage that wrote θ_step: prepare for θ_0, the update of iteration step-1 otherwise."""
    return ("prepare", 0) if step == 0 else ("update", step - 1)


def upstream_of(stage: str, k: int) -> list[tuple[str, int]]:
    """The (stage, iteration) whose outputs stage k reads: the dependency edges of docs/algorithm.md §2.

    Recorded in each manifest (as digests), so a stage whose inputs were recomputed differently is
    redone. Digests chain (see Manifest.digest), so θ_k's writer also stands for everything before
    it (earlier pool snapshots, the data splits).
    """
    if stage == "prepare":
        return []
    policy = policy_writer(k)
    return {
        "snapshot": [policy],
        "seeds": [policy, ("snapshot", k)],
        "continuation": [policy, ("seeds", k)],
        "verify": [("continuation", k)],
        "update": [policy, ("verify", k)],
        "evaluate": [policy_writer(k + 1)],  # θ_{k+1}; k = -1 evaluates θ_0
    }[stage]


def rollout_step(cfg: RunConfig, k: int) -> int:
    """The policy step whose θ samples iteration k's on-policy responses and continuations: θ_k, or with
    pipeline.max_staleness = s, θ_{k-s} (θ_0 while k < s), so that iteration k+1 can be sampled while
    update k runs. The continuation's recorded upstream stays θ_k's writer: seeds k chain on it anyway."""
    return max(0, k - cfg.pipeline.max_staleness)


def eval_due(cfg: RunConfig, k: int) -> bool:
    """Evaluate θ_{k+1} after iteration k; k = -1 evaluates θ_0 (the starting point)."""
    return k == -1 or (k + 1) % cfg.eval.every == 0 or k == cfg.iterations - 1


def stage_seed(cfg: RunConfig, k: int, stage: str) -> int:
    """A sampling seed per (run seed, iteration, stage): reruns reproduce, stages differ."""
    h = hashlib.sha256(f"{cfg.seed}/{k}/{stage}".encode()).digest()
    return int.from_bytes(h[:4], "little")
