"""The update stage through `accelerate launch`: the command, and a child that dies with its parent.

`update.launcher=accelerate_per_update` runs `python -m thinking_seeds.train.trainer` under
accelerate (N processes: DDP; gloo on CPU) once per update and reads its metrics back from a JSON
hand-over file; the trainer code is the same as the in-process update. `update.launcher=accelerate`
launches the same way once per run and keeps the trainer (pipeline/trainer_client.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

from thinking_seeds.assets import ACCELERATE_NEUTRAL_CONFIG
from thinking_seeds.config import ConfigError, RunConfig
from thinking_seeds.config.placement import placement
from thinking_seeds.engine.models import resolve_device
from thinking_seeds.store.child_guard import die_with_parent
from thinking_seeds.store.run_dir import RunDir

LAUNCH_MODULE = "accelerate.commands.launch"
LOOPBACK_LAUNCH_MODULE = "thinking_seeds.pipeline.loopback_launch"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accelerate_gpu_ids(gpus: tuple[int, ...] | list[int], visible: str | None) -> str:
    """accelerate's --gpu_ids for the trainer's GPUs `gpus`, indices among the GPUs this process sees: accelerate
    writes --gpu_ids into the child's CUDA_VISIBLE_DEVICES as they are, so under CUDA_VISIBLE_DEVICES (a
    `ts compare` job given GPUs 2,3, SLURM, a container) they are translated to the entries of that list --
    otherwise index 0 would be the machine's first GPU, not this process's."""
    if visible is None or not visible.strip():
        return ",".join(str(g) for g in gpus)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    for g in gpus:
        if g >= len(entries):
            raise ConfigError(
                f"trainer GPU {g} is not among the {len(entries)} GPU(s) of CUDA_VISIBLE_DEVICES={visible}: "
                "set update.gpu_ids (or device) to indices below that count, counting from 0"
            )
    return ",".join(entries[g] for g in gpus)


def launch_prefix(cfg: RunConfig, machine_rank: int = 0) -> tuple[list[str], bool]:
    """`accelerate launch` and its options for the run's update (up to the module to run), and
    whether the trainer must be told `--cpu`. Shared by the per-update launch, the persistent
    trainer (pipeline/trainer_client.py; machine rank 0, the driver's) and `ts trainer-node`
    (the other machines of a trainer group: `machine_rank` 1 .. update.num_machines - 1)."""
    u = cfg.update
    n, machines = u.num_processes, u.num_machines
    total = n * machines  # accelerate's --num_processes counts the whole group
    precision = u.mixed_precision  # accelerate's own words: no | bf16
    cmd = [sys.executable, "-m", LAUNCH_MODULE, "--config_file", str(ACCELERATE_NEUTRAL_CONFIG)]
    cmd += ["--num_processes", str(total), "--num_machines", str(machines)]
    cmd += ["--mixed_precision", precision, "--dynamo_backend", "no"]
    device = resolve_device(cfg.device)  # a device this machine lacks fails here, in one line
    # The trainer processes' GPUs on this machine (update.gpu_ids, or as config/placement.py derives them):
    # accelerate hands rank r the r-th of them as its cuda:0, so no rank lands on the engine's GPU by accident.
    gpus = placement(cfg, torch.cuda.device_count() if device.type == "cuda" else 0).trainer_gpus
    if gpus:
        cmd += ["--gpu_ids", accelerate_gpu_ids(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))]
    if total > 1:
        # With Accelerator(cpu=True) this means gloo DDP on CPU (docs/algorithm.md §7).
        cmd += ["--multi_gpu"]
    if machines > 1:
        # Every machine runs this with its own rank; they meet at the driver's machine (rank 0).
        cmd += ["--machine_rank", str(machine_rank), "--main_process_ip", str(u.main_process_ip)]
        cmd += ["--main_process_port", str(u.main_process_port)]
    elif total > 1:
        # A free rendezvous port per launch: the default 29500 can still be held by a run killed a moment ago.
        cmd += ["--main_process_port", str(_free_port())]
        # One machine: accelerate's launch with every port on loopback (torch's rendezvous store
        # otherwise listens on all interfaces, unauthenticated; pipeline/loopback_launch.py).
        cmd[2] = LOOPBACK_LAUNCH_MODULE
    return cmd, device.type == "cpu"  # --cpu: device=cpu, or auto without a GPU


def accelerate_command(run: RunDir, cfg: RunConfig, k: int, metrics_path: Path, ref: Path | None) -> list[str]:
    cmd, cpu = launch_prefix(cfg)
    cmd += ["-m", "thinking_seeds.train.trainer", "--policy", str(run.policy(k)), "--rollouts", str(run.rollouts(k))]
    cmd += ["--out-root", str(run.policy_root), "--step", str(k + 1), "--config", str(run.config_path)]
    cmd += ["--metrics-out", str(metrics_path)]
    if ref is not None:
        cmd += ["--ref", str(ref)]
    if cpu:
        cmd += ["--cpu"]
    return cmd


def without_launcher(cmd: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """`cmd` (an `accelerate launch` command from launch_prefix) and `env`, or -- for a group of one
    process that accelerate would start with its simple launcher -- the command and environment that
    launcher gives its one child, computed here with accelerate's own code: the trainer then runs as
    this process's child, without the launcher's interpreter between them (~230 MB of RSS, torch
    imported only to Popen and wait). What the launcher guarded stays: PR_SET_PDEATHSIG (the caller's
    preexec_fn) now reaches the trainer itself after a kill -9, and a SIGTERM stops it directly."""
    if cmd[1:3] != ["-m", LAUNCH_MODULE]:
        return cmd, env
    from unittest import mock

    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    with mock.patch.dict(os.environ, env, clear=True):  # what the launcher would read: its own environment
        args = launch_command_parser().parse_args(cmd[3:])
        args, _, _ = _validate_launch_command(args)  # with launch_prefix's neutral config file, never the user's
        simple = not (args.use_deepspeed or args.use_fsdp or args.use_megatron_lm or args.multi_gpu or args.tpu)
        if not simple or args.num_processes != 1 or args.num_machines != 1:
            return cmd, env  # a group: accelerate's launcher decides
        direct, child_env = prepare_simple_launcher_cmd_env(args)
    return direct, child_env


def launch_env() -> dict[str, str]:
    """This process's environment for a trainer launch: one OpenMP thread and plain accelerate output,
    unless the user set them."""
    return {"OMP_NUM_THREADS": "1", "ACCELERATE_DISABLE_RICH": "1", **os.environ}


def launch_update(run: RunDir, cfg: RunConfig, k: int, metrics_path: Path, ref: Path | None) -> dict:
    """Run the update of iteration k under accelerate; its metrics, or RuntimeError with the output's tail."""
    cmd, env = without_launcher(accelerate_command(run, cfg, k, metrics_path, ref), launch_env())
    # Without the death signal a `kill -9` of a run leaves `accelerate launch` and its workers training on,
    # racing the resumed run for the same θ_{k+1}; on SIGTERM the launcher stops its workers too.
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=die_with_parent)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(
            f"accelerate update of iteration {k} failed (exit {proc.returncode}):\n{tail}\ncommand: {' '.join(cmd)}"
        )
    return json.loads(metrics_path.read_text())
