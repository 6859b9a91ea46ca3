"""What the driver puts into Ray's object store for its rollout workers (cluster=ray), and how a worker
takes it back out.

Written by the driver (the `ts`/flow process: engine/ray_workers.py `RayRolloutPool`, `ray.put` once per
checkpoint or policy); read by each Ray rollout worker (an actor process on some node:
`RolloutWorker.run_shard`, `ray.get` once per tag). Nothing here imports Ray: the driver and the workers
call Ray themselves, with the payloads and tags defined here.

Two payloads, each named by a tag that travels with every shard:
- a checkpoint's files (cluster.weights=object_store: no shared filesystem): {file name: bytes}, every
  file but the optimizer state and the manifest, verified against that manifest first; its tag is the
  checkpoint's path and the files' mtimes and sizes (a rewritten directory is another checkpoint); the
  worker writes them to a folder of its own and loads that;
- a policy held in memory (transports/live_weights.py, in either mode): its state dict on the host; its
  tag is `LIVE` + the policy's identity; the worker holds it in its own live_weights under the
  checkpoint's path, where its engine looks before any file.
"""

from __future__ import annotations

from pathlib import Path

LIVE = "live|"  # the tag of a policy shipped as tensors (no checkpoint files)
KEEP_CHECKPOINTS = 8  # object_store: checkpoints kept (driver refs, worker copies): θ_k and the pool's members


def _shipped_files(checkpoint: Path) -> list[Path]:
    skip = ("optimizer.safetensors", "manifest.json")
    return sorted(f for f in checkpoint.iterdir() if f.is_file() and f.name not in skip)


def checkpoint_tag(checkpoint: Path) -> str:
    """The identity of a checkpoint's shipped files on disk (a rewritten directory is another checkpoint)."""
    stats = ",".join(f"{f.name}:{f.stat().st_mtime_ns}:{f.stat().st_size}" for f in _shipped_files(checkpoint))
    return f"{checkpoint.resolve()}|{stats}"


def checkpoint_files(checkpoint: Path) -> dict[str, bytes]:
    """A checkpoint's files for the object store: every file but the optimizer state and the manifest,
    verified against that manifest first (the copy is then loaded without one)."""
    if (checkpoint / "manifest.json").is_file():
        from thinking_seeds.store.checkpoints import verified

        verified(checkpoint)
    return {f.name: f.read_bytes() for f in _shipped_files(checkpoint)}


def write_checkpoint(files: dict[str, bytes], out: Path) -> Path:
    """A worker's copy of a shipped checkpoint: its files written into the new folder `out`."""
    out.mkdir()
    for name, data in files.items():
        (out / name).write_bytes(data)
    return out


def live_tag(policy_id: str) -> str:
    """The tag of a policy shipped as tensors."""
    return LIVE + policy_id


def is_live(tag: str) -> bool:
    return tag.startswith(LIVE)


def live_policy_id(tag: str) -> str:
    """The identity of the policy a live tag names."""
    return tag.removeprefix(LIVE)


def live_state(live) -> dict:
    """A policy held in memory as the object store takes it: its tensors on the host (`ray.put` copies
    them, so an in-process trainer's next update, which changes them in place, does not reach the copy)."""
    return {n: t.detach().cpu() for n, t in live.state.items()}
