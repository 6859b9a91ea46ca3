"""Placement as the user says (config/placement.py): the engine's and the trainer ranks' GPUs, what a Ray
rollout worker reserves, each comparison job's CUDA_VISIBLE_DEVICES, accelerate's --gpu_ids, and one-line
refusals when the roles cannot share what they are given. No GPU needed: the plan is a pure function."""

from __future__ import annotations

import sys

import pytest

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.config.placement import job_gpu_slots, placement, ray_worker_gpus, visible_gpu_ids


def cfg(*sets: str):
    return load_config("tiny", list(sets))


def test_one_trainer_process_shares_the_gpu_device_names():
    plan = placement(cfg("device=cuda:1"), visible_gpus=2)
    assert plan.engine_device == "cuda:1" and plan.engine_gpus == (1,)
    assert plan.trainer_gpus == (1,) and plan.shared_gpus == (1,) and plan.engine_shares_gpu
    in_process = placement(cfg("device=cuda:1", "update.launcher=in_process"), visible_gpus=2)
    assert in_process.trainer_device == "cuda:1" and in_process.engine_shares_gpu
    cpu = placement(cfg("device=auto"), visible_gpus=0)
    assert (cpu.engine_device, cpu.engine_gpus, cpu.trainer_gpus, cpu.shared_gpus) == ("cpu", (), (), ())


def test_several_trainer_processes_avoid_the_engines_gpu_when_they_can():
    two = ["update.num_processes=2"]
    plan = placement(cfg("device=cuda:0", *two), visible_gpus=4)
    assert plan.engine_gpus == (0,) and plan.trainer_gpus == (1, 2) and not plan.engine_shares_gpu
    tight = placement(cfg("device=cuda:0", *two), visible_gpus=2)  # not enough for both: colocated
    assert tight.trainer_gpus == (0, 1) and tight.shared_gpus == (0,)
    explicit = placement(cfg("device=cuda:3", *two, "update.gpu_ids=[0, 1]"), visible_gpus=4)
    assert explicit.engine_gpus == (3,) and explicit.trainer_gpus == (0, 1) and not explicit.engine_shares_gpu


def test_vllm_tensor_parallel_engine_takes_consecutive_or_named_gpus():
    tp = ["rollout.engine=vllm", "rollout.tensor_parallel_size=2", "update.num_processes=2"]
    plan = placement(cfg("device=cuda:0", *tp), visible_gpus=4)
    assert plan.engine_gpus == (0, 1) and plan.trainer_gpus == (2, 3)
    named = placement(cfg("device=auto", *tp, "rollout.gpu_ids=[2, 3]", "update.gpu_ids=[0, 1]"), visible_gpus=4)
    assert named.engine_device == "cuda:2" and named.engine_gpus == (2, 3) and named.trainer_gpus == (0, 1)


@pytest.mark.parametrize(
    ("sets", "visible", "words"),
    [
        (["update.num_processes=4"], 2, ["update.num_processes=4", "2 GPU(s) are visible"]),
        (["update.num_processes=2", "update.gpu_ids=[1, 1]"], 4, ["update.gpu_ids=[1, 1]", "twice"]),
        (["update.num_processes=2", "update.gpu_ids=[1]"], 4, ["update.gpu_ids=[1]", "one GPU per process"]),
        (["update.num_processes=2", "update.gpu_ids=[0, 5]"], 4, ["GPU 5", "4 GPU(s) are visible"]),
        (["device=cuda:2"], 2, ["device=cuda:2", "cuda:0..cuda:1"]),
        (["device=cpu", "rollout.gpu_ids=[0]"], 1, ["rollout.gpu_ids=[0]", "device=cpu"]),
        (["rollout.engine=vllm", "rollout.gpu_ids=[0]", "rollout.tensor_parallel_size=2"], 2, ["give it 2"]),
        (["device=cuda:1", "rollout.gpu_ids=[0]"], 2, ["two GPUs"]),
        (["rollout.engine=vllm", "rollout.tensor_parallel_size=2", "device=cuda:1"], 2, ["GPUs 1..2"]),
    ],
)
def test_roles_that_cannot_share_what_they_are_given_are_refused_in_one_line(sets, visible, words):
    with pytest.raises(ConfigError) as e:
        placement(cfg(*sets), visible_gpus=visible)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_ray_workers_reserve_gpus_tied_to_the_device_and_tensor_parallelism():
    ray = ["cluster=ray", "rollout.engine=vllm"]
    assert ray_worker_gpus(cfg(*ray), visible=0) == 0.0  # auto on a CPU driver
    assert ray_worker_gpus(cfg(*ray, "device=cuda"), visible=8) == 1.0
    assert ray_worker_gpus(cfg(*ray, "device=cuda", "rollout.tensor_parallel_size=4"), visible=8) == 4.0
    assert ray_worker_gpus(cfg(*ray, "rollout.worker_gpus=0.5"), visible=1) == 0.5  # two engines per GPU
    assert placement(cfg(*ray, "device=cuda", "rollout.tensor_parallel_size=2"), visible_gpus=8).worker_gpus == 2.0
    for sets, words in (
        (["rollout.tensor_parallel_size=4", "rollout.worker_gpus=2"], "rollout.worker_gpus=4"),
        (["device=cpu", "rollout.worker_gpus=1"], "device=cpu"),
        (["device=cuda", "rollout.worker_gpus=0"], "Ray hides every GPU"),
    ):
        with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
            ray_worker_gpus(cfg(*ray, *sets), visible=8)


def test_worker_engine_runs_on_the_gpus_ray_gives_it():
    from thinking_seeds.engine.ray_workers import worker_config

    c = cfg("cluster=ray", "device=cuda:3", "rollout.engine=vllm", "rollout.gpu_ids=[3]")
    w = worker_config(c, 1.0)
    assert w.device == "cuda" and w.rollout.gpu_ids is None and c.device == "cuda:3"  # the driver's stays
    assert worker_config(c, 0.0).device == "cpu"
    assert w.config_hash() == c.config_hash()  # the same samples wherever they run


def test_placement_keys_are_not_hashed():
    base = cfg()
    moved = cfg(
        "update.gpu_ids=[1]",
        "rollout.gpu_ids=[0]",
        "rollout.max_model_len=512",
        "rollout.gpu_memory_utilization=0.5",
        "rollout.worker_gpus=1",
    )
    assert moved.config_hash() == base.config_hash()


def test_comparison_jobs_get_disjoint_gpus_or_are_refused():
    assert visible_gpu_ids(None, 3) == ["0", "1", "2"]
    assert visible_gpu_ids("4,6", 2) == ["4", "6"]  # the parent's own CUDA_VISIBLE_DEVICES, renamed to its children
    assert visible_gpu_ids("", 0) == []
    assert job_gpu_slots(["0", "1", "2", "3"], 2) == ["0,1", "2,3"]
    assert job_gpu_slots(["4", "6", "7"], 3) == ["4", "6", "7"]
    assert job_gpu_slots(["0", "1", "2"], 2) == ["0", "1"]  # equal shares; the odd one is left idle
    assert job_gpu_slots([], 8) is None  # CPU runs: nothing to split
    with pytest.raises(ConfigError) as e:
        job_gpu_slots(["0", "1"], 4)
    assert "\n" not in str(e.value) and "--parallel 2" in str(e.value)


def test_run_jobs_gives_each_concurrent_job_its_own_gpus(tmp_path):
    from rich.console import Console

    from thinking_seeds.experiments.jobs import Job, run_jobs

    code = "import os, sys, time; print('CVD=' + os.environ.get('CUDA_VISIBLE_DEVICES', '-')); time.sleep(0.3)"
    jobs = [Job(f"j{i}", [sys.executable, "-c", code], tmp_path / f"j{i}.log") for i in range(3)]
    results = run_jobs(jobs, tmp_path, parallel=2, console=Console(file=open(tmp_path / "ui", "w")), poll=0.05,
                       gpus=["0", "1", "2", "3"])  # fmt: skip
    assert [r.status for r in results] == ["done"] * 3
    seen = [
        next(ln for ln in (tmp_path / f"j{i}.log").read_text().splitlines() if ln.startswith("CVD=")) for i in range(3)
    ]
    assert seen[0] != seen[1] and {s.removeprefix("CVD=") for s in seen} <= {"0,1", "2,3"}  # j0, j1 ran together
    cpu = run_jobs(
        jobs[:1], tmp_path, parallel=2, console=Console(file=open(tmp_path / "ui2", "w")), poll=0.05, gpus=[]
    )
    assert cpu[0].status == "done" and "CVD=-" in (tmp_path / "j0.log").read_text().splitlines()[-1]


def test_accelerate_gets_the_trainer_ranks_gpu_ids(tmp_path, monkeypatch):
    import torch

    from thinking_seeds.pipeline.update_launcher import accelerate_command
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run("acc", tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)

    def gpu_ids(*sets: str) -> str | None:
        cmd = accelerate_command(run, cfg(*sets), 0, tmp_path / "m.json", None)
        return cmd[cmd.index("--gpu_ids") + 1] if "--gpu_ids" in cmd else None

    assert gpu_ids("device=cuda:1") == "1"  # one process: beside the engine, on `device`
    assert gpu_ids("device=cuda:0") == "0"
    assert gpu_ids("device=cuda:0", "update.num_processes=2") == "1,2"  # not the engine's GPU 0
    assert gpu_ids("device=cuda:0", "update.num_processes=2", "update.gpu_ids=[3, 2]") == "3,2"
    with pytest.raises(ConfigError, match="update.num_processes=8"):
        gpu_ids("update.num_processes=8")
