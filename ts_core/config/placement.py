"""Where each role of a run computes: the engine's GPUs, the trainer processes' GPUs, what a Ray rollout
worker reserves, and which GPUs each job of a comparison sees.

Pure functions of the run config and the number of GPUs this process sees (the caller asks torch), so the
plan is the same in a test on a CPU as on a GPU machine. Anything the roles cannot share as given is a
`ConfigError` in one line naming the key to change (`ts` exits 2).

    plan = placement(cfg, visible_gpus=torch.cuda.device_count())
    plan.engine_device        # 'cpu' or 'cuda:N': where this process's engine runs
    plan.trainer_gpus         # accelerate's --gpu_ids (one per trainer process on each machine)
    plan.shared_gpus          # GPUs the engine shares with a trainer process: vLLM sizes itself to leave room

Defaults keep `device` meaning what it always meant: one trainer process and the engine on the GPU of
`device` (they share it); with several trainer processes the trainer takes GPUs the engine does not use
when there are enough of them (a GPU each), and otherwise the first ones, sharing the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass

from thinking_seeds.config.loading import ConfigError

__all__ = ["Placement", "engine_gpus", "job_gpu_slots", "placement", "ray_worker_gpus", "visible_gpu_ids"]


@dataclass(frozen=True)
class Placement:
    """Which GPUs each role of a run uses on this machine (empty tuples on the CPU)."""

    engine_device: str  # 'cpu' or 'cuda:N', N the engine's first GPU
    engine_gpus: tuple[int, ...]  # the engine's GPUs (rollout.tensor_parallel_size of them for vLLM)
    trainer_device: str  # where an in-process trainer runs ('cpu' or 'cuda:N'); a launched one: its rank's GPU
    trainer_gpus: tuple[int, ...]  # one per trainer process of this machine (accelerate --gpu_ids); in process: one
    shared_gpus: tuple[int, ...]  # engine GPUs a trainer process also uses
    worker_gpus: float  # cluster=ray: GPUs each rollout worker reserves

    @property
    def engine_shares_gpu(self) -> bool:
        return bool(self.shared_gpus)


def _check_ids(key: str, ids: list[int], visible: int) -> None:
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{key}={ids} names a GPU twice: give each process its own GPU")
    bad = [i for i in ids if i < 0 or i >= visible]
    if bad:
        raise ConfigError(
            f"{key}={ids} names GPU {bad[0]}, but {visible} GPU(s) are visible (0..{visible - 1}; "
            "CUDA_VISIBLE_DEVICES renumbers them): name visible GPUs"
        )


def _device_index(device: str, visible: int) -> int | None:
    """`device` as a GPU index (None: the CPU), refusing a GPU this machine does not have."""
    if device == "cpu" or (device == "auto" and visible == 0):
        return None
    if visible == 0:
        raise ConfigError(f"device={device}, but no GPU is visible; use device=cpu or device=auto")
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if index >= visible:
        raise ConfigError(f"device={device}, but only {visible} GPU(s) are visible (cuda:0..cuda:{visible - 1})")
    return index


def _engine_gpus(cfg, first: int | None, visible: int) -> tuple[int, ...]:
    r = cfg.rollout
    width = r.tensor_parallel_size if r.engine == "vllm" else 1
    if r.gpu_ids is not None:
        if first is None:
            where = "no GPU is visible here" if visible == 0 else f"device={cfg.device} runs on the CPU"
            raise ConfigError(
                f"rollout.gpu_ids={r.gpu_ids} places the engine on GPUs, but {where}: leave rollout.gpu_ids unset"
                + ("" if visible == 0 else ", or set device=auto (or cuda)")
            )
        if len(r.gpu_ids) != width:
            raise ConfigError(
                f"rollout.gpu_ids={r.gpu_ids} gives the engine {len(r.gpu_ids)} GPU(s); it shards over {width} "
                f"(rollout.tensor_parallel_size={r.tensor_parallel_size}, engine={r.engine}): give it {width}"
            )
        if cfg.device.startswith("cuda:") and r.gpu_ids[0] != first:
            raise ConfigError(
                f"device={cfg.device} and rollout.gpu_ids={r.gpu_ids} place the engine on two GPUs: set one of them"
            )
        _check_ids("rollout.gpu_ids", r.gpu_ids, visible)
        return tuple(r.gpu_ids)
    if first is None:
        return ()
    ids = tuple(range(first, first + width))
    if ids[-1] >= visible:
        raise ConfigError(
            f"rollout.tensor_parallel_size={width} from GPU {first} needs GPUs {first}..{ids[-1]}, but {visible} "
            "are visible: set rollout.gpu_ids (or device) to GPUs that exist"
        )
    return ids


def _trainer_gpus(cfg, engine: tuple[int, ...], visible: int) -> tuple[int, ...]:
    u = cfg.update
    if not engine:  # the CPU: gloo processes, no GPU
        return ()
    if u.launcher == "in_process":  # the pipeline's own process: on `device`, beside the engine
        return engine[:1]
    n = u.num_processes
    if u.gpu_ids is not None:
        if len(u.gpu_ids) != n:
            raise ConfigError(
                f"update.gpu_ids={u.gpu_ids} has {len(u.gpu_ids)} GPU(s) for update.num_processes={n} trainer "
                f"processes: give one GPU per process"
            )
        _check_ids("update.gpu_ids", u.gpu_ids, visible)
        return tuple(u.gpu_ids)
    if n > visible:
        raise ConfigError(
            f"update.num_processes={n} trainer processes need a GPU each, but {visible} GPU(s) are visible: set "
            f"update.num_processes={visible} or fewer"
        )
    if n == 1:
        return engine[:1]  # `device` names where the engine and the trainer run
    free = [g for g in range(visible) if g not in engine]
    return tuple(free[:n]) if len(free) >= n else tuple(range(n))


def ray_worker_gpus(cfg, visible: int) -> float:
    """GPUs each Ray rollout worker reserves: rollout.worker_gpus, or (unset) tied to the engine's device
    and tensor parallelism; vLLM refuses fewer whole GPUs than it shards over."""
    r = cfg.rollout
    on_cpu = cfg.device == "cpu" or (cfg.device == "auto" and visible == 0)
    width = r.tensor_parallel_size if r.engine == "vllm" else 1
    if r.worker_gpus is None:
        return 0.0 if on_cpu else float(width)
    if r.worker_gpus > 0 and cfg.device == "cpu":
        raise ConfigError(
            f"rollout.worker_gpus={r.worker_gpus} reserves GPUs for engines that run on the CPU (device=cpu): set "
            "device=auto (or cuda), or rollout.worker_gpus=0"
        )
    if r.worker_gpus == 0 and cfg.device.startswith("cuda"):
        raise ConfigError(
            f"rollout.worker_gpus=0 with device={cfg.device}: Ray hides every GPU from a worker that reserves none, "
            f"so its engine could not run there; set rollout.worker_gpus={width} (or leave it unset)"
        )
    fractional_ok = width == 1 and r.worker_gpus < 1  # several one-GPU engines may share a GPU
    if r.engine == "vllm" and r.worker_gpus > 0 and not fractional_ok and r.worker_gpus != width:
        raise ConfigError(
            f"rollout.worker_gpus={r.worker_gpus}: a vLLM engine shards over rollout.tensor_parallel_size={width} "
            f"whole GPU(s); set rollout.worker_gpus={width} (or leave it unset)"
        )
    return float(r.worker_gpus)


def engine_gpus(cfg, visible_gpus: int) -> tuple[int, ...]:
    """The engine's GPUs alone (empty: the CPU), without the trainer's part of the plan: what a Ray rollout
    worker, whose GPUs Ray chose, needs."""
    return _engine_gpus(cfg, _device_index(cfg.device, visible_gpus), visible_gpus)


def placement(cfg, visible_gpus: int) -> Placement:
    """The run's placement on this machine, `visible_gpus` being torch.cuda.device_count() here."""
    first = _device_index(cfg.device, visible_gpus)
    engine = _engine_gpus(cfg, first, visible_gpus)
    trainer = _trainer_gpus(cfg, engine, visible_gpus)
    shared = tuple(g for g in engine if g in trainer)
    engine_device = f"cuda:{engine[0]}" if engine else "cpu"
    return Placement(
        engine_device=engine_device,
        engine_gpus=engine,
        trainer_device=f"cuda:{trainer[0]}" if trainer else engine_device,
        trainer_gpus=trainer,
        shared_gpus=shared,
        worker_gpus=ray_worker_gpus(cfg, visible_gpus) if cfg.cluster.kind == "ray" else 0.0,
    )


def visible_gpu_ids(cuda_visible_devices: str | None, device_count: int) -> list[str]:
    """The GPUs this process may hand to its children, as CUDA_VISIBLE_DEVICES names them (ids or UUIDs);
    without that variable, 0..device_count-1."""
    if cuda_visible_devices is None:
        return [str(i) for i in range(device_count)]
    return [g.strip() for g in cuda_visible_devices.split(",") if g.strip()][:device_count]


def job_gpu_slots(gpus: list[str], parallel: int) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES for each of `parallel` concurrent jobs (a comparison's runs): the visible GPUs in
    `parallel` disjoint groups of equal size, so two runs (and their trainers) never land on one GPU by
    accident. None without GPUs (CPU jobs). Fewer GPUs than jobs is refused."""
    if not gpus:
        return None
    if len(gpus) < parallel:
        raise ConfigError(
            f"--parallel {parallel} with {len(gpus)} visible GPU(s): each concurrent run gets GPUs of its own "
            f"(CUDA_VISIBLE_DEVICES per job); use --parallel {len(gpus)} or fewer, or CUDA_VISIBLE_DEVICES= for a "
            "comparison on the CPU"
        )
    per = len(gpus) // parallel
    return [",".join(gpus[i * per : (i + 1) * per]) for i in range(parallel)]
