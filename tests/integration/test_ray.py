"""cluster=ray (issue #14 item 2): rollout and verifier workers as Ray actors on a local cluster that
this module starts (`ray start --head --num-cpus 2 --port <free>`, tests/helpers/ray_cluster.py) and stops.

- 1 or 2 rollout workers write the same prefixes and rollouts, and train the same weights, as the
  single-process run (cluster=local) of the same config: shards of rollout.batch_size requests with
  their own seeds, whoever runs them;
- a rollout worker and a verifier worker killed (SIGKILL) in the middle of a stage: Ray restarts them,
  the stage retries their shard, and the results are those of the undisturbed run;
- the driver killed (kill -9) in the seeds stage, under Prefect: the rerun resumes with the same results;
- a user's mistake (no Ray, no address, nothing listening) is one ClusterError line, exit 2 in `ts`.

Every test that starts the cluster, or a `ts` process, is marked slow (CI's second step, `make
test-slow`); the default suite keeps the ones that need neither. That importing the pipeline never
imports Ray is checked with every module's import in tests/e2e/test_device_cpu.py.

The tiny run of tests/helpers/tiny with rollout.batch_size=8: the continuation stage's 32 requests are
4 shards, so 2 workers really share a stage. With 2 rollout and 2 verifier actors on 2 CPUs, each
actor reserves half a CPU (cluster.worker_cpus=0.5).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

from tests.helpers import REPO  # noqa: E402
from tests.helpers.ray_cluster import (  # noqa: E402
    DRIVER_RUN_ID,
    driver_args,
    join_local_node,
    running_cluster,
    stop_node,
)
from tests.helpers.resume import _assert_same_results, kill_and_resume  # noqa: E402
from tests.helpers.tiny import MOVING, TINY_RUN_ID  # noqa: E402

# 4 shards per continuation stage: something to share; no snapshot at iteration 1, so θ_1 is not a
# checkpoint and reaches the workers in memory
SHARDED = ["rollout.batch_size=8", "pool.snapshot_every=4"]


def ray_overrides(address: str, workers: int) -> list[str]:
    return [
        "cluster.kind=ray",
        f"cluster.address={address}",
        "cluster.worker_cpus=0.5",
        f"rollout.workers={workers}",
        f"reward.workers={workers}",
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="module")
def ray_cluster():
    with running_cluster(_env(), num_cpus=2) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _fresh_pools():
    """No test inherits the last one's actors (on 2 CPUs they would hold every CPU a driver subprocess needs)."""
    from thinking_seeds.pipeline.session import close_ray_pools

    close_ray_pools()


@pytest.fixture(scope="module")
def sharded_reference(tmp_path_factory, tiny_overrides):
    """The single-process run (cluster=local) of the sharded tiny config, run id `tiny`."""
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    overrides = tiny_overrides + MOVING + SHARDED
    run = train(RunDir.for_run(TINY_RUN_ID, tmp_path_factory.mktemp("ray-reference")), load_config("tiny", overrides))
    return SimpleNamespace(run=run, overrides=overrides)


def _train_on_ray(base, overrides):
    """The run, and its Ray pools as they were at its end, looked at in its life (its close stops them):
    the pool objects, their actors' pids and nodes."""
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.pipeline.run_resources import held_process
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run(TINY_RUN_ID, base)
    pools = SimpleNamespace()

    def look(_cfg):
        pools.rollout, pools.verify = held_process(run, "ray_rollout"), held_process(run, "ray_verify")
        pools.pids, pools.nodes = pools.rollout.pids(), pools.rollout.nodes()
        pools.rollout_actors, pools.verify_actors = len(pools.rollout.actors), len(pools.verify.actors)

    return train(run, load_config("tiny", overrides), then=look), pools


@pytest.mark.slow  # starts a local Ray cluster: CI's second step (make test-slow)
@pytest.mark.parametrize(
    "workers, weights", [(1, "path"), (2, "path"), (2, "object_store")], ids=["1-path", "2-path", "2-object-store"]
)
def test_workers_give_the_single_process_samples_and_weights(
    workers, weights, ray_cluster, sharded_reference, tmp_path
):
    """With 1 or 2 workers, reading checkpoints by path or from Ray's object store (their own copies),
    and the policies the trainer hands over in memory as tensors from the object store."""
    overrides = sharded_reference.overrides + ray_overrides(ray_cluster.address, workers)
    run, pools = _train_on_ray(tmp_path, overrides + [f"cluster.weights={weights}"])
    _assert_same_results(run, sharded_reference.run, 2)
    assert pools.rollout_actors == workers and pools.verify_actors == workers
    assert len(set(pools.pids)) == workers  # distinct processes
    m = run.read_manifest(1, "continuation")
    assert m.seconds.get("workers_generation", 0) > 0  # the shards ran on the workers, not here
    # θ_1 reached the workers in memory (no checkpoint of step 1): its tensors through the object store,
    # in either mode
    assert not (run.policy(1) / "model.safetensors").exists() and "weight_ship" in m.seconds


@pytest.mark.slow  # starts a local Ray cluster: CI's second step (make test-slow)
def test_stacked_drafts_on_workers_are_the_single_process_drafts(ray_cluster, sharded_reference, tmp_path):
    """Several checkpoints' calls (the seeds stage's, one per pool member), 2 shards each: the HF engine
    in this process stacks shard i of every call (engine/stacked.py); 2 Ray workers run the same groups
    and sample the same tokens and log-probs, bit for bit."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from thinking_seeds.config import load_config
    from thinking_seeds.data.ray_pool import connect
    from thinking_seeds.engine.ray_workers import RayRolloutPool
    from thinking_seeds.engine.rollout import SamplingParams
    from thinking_seeds.engine.sharding import LocalRollout, build_engine, generate_sharded_many
    from thinking_seeds.engine.stacked import StackedModel

    theta0 = sharded_reference.run.policy(0)
    checkpoints = []
    for j in range(3):  # θ_0 and two copies with weights of their own
        ck = tmp_path / f"member{j}"
        shutil.copytree(theta0, ck, ignore=shutil.ignore_patterns("manifest.json", "optimizer.safetensors"))
        weights = load_file(str(ck / "model.safetensors"))
        g = torch.Generator().manual_seed(j)
        save_file(
            {k: v + 0.05 * j * torch.randn(v.shape, generator=g) for k, v in weights.items()},
            str(ck / "model.safetensors"),
        )
        checkpoints.append(ck)
    cfg = load_config("tiny", sharded_reference.overrides)
    prompts = [[5 + (i * 7 + j) % 20 for i in range(6 + j)] for j in range(12)]
    calls = [
        (ck, prompts, SamplingParams(max_new_tokens=20, seed=j), [4 + (3 * i + j) % 17 for i in range(12)])
        for j, ck in enumerate(checkpoints)
    ]  # 12 requests each: 2 shards of rollout.batch_size=8
    engine = build_engine(theta0, cfg)
    here = generate_sharded_many(LocalRollout(engine), calls, cfg.rollout.batch_size)
    assert isinstance(engine._stacked, StackedModel) and len(engine._stacked.tags) == 3  # stacked here
    ray_cfg = load_config("tiny", sharded_reference.overrides + ray_overrides(ray_cluster.address, 2))
    pool = RayRolloutPool(connect(ray_cluster.address), theta0, ray_cfg, 2)
    try:
        there = generate_sharded_many(pool, calls, cfg.rollout.batch_size)
    finally:
        pool.close()
    assert [[g.token_ids for g in x] for x in there] == [[g.token_ids for g in x] for x in here]
    assert [[g.logprobs for g in x] for x in there] == [[g.logprobs for g in x] for x in here]
    assert [[g.token_ids for g in x] for x in here][0] != [[g.token_ids for g in x] for x in here][2]


def _killing(real, killed: list[int]):
    """fan_out that SIGKILLs the actor it has just given the first item of its first call to."""

    def fan_out(ray, actors, submit, items, retries=3, on_result=None):
        if killed:
            return real(ray, actors, submit, items, retries, on_result)

        def submit_then_kill(actor, item):
            pid = ray.get(actor.pid.remote())
            ref = submit(actor, item)
            if not killed:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return ref

        return real(ray, actors, submit_then_kill, items, retries, on_result)

    return fan_out


@pytest.mark.slow  # starts a local Ray cluster: CI's second step (make test-slow)
def test_killed_workers_are_restarted_and_their_shards_retried(ray_cluster, sharded_reference, tmp_path, monkeypatch):
    """A rollout worker dies in the seeds stage of iteration 0, a verifier worker in its verification:
    nothing is lost, nothing counted twice, the results are the undisturbed run's."""
    from thinking_seeds.data import ray_pool
    from thinking_seeds.engine import ray_workers
    from thinking_seeds.pipeline import session

    session.close_ray_pools()  # fresh workers: the kill hits this run's first shard
    killed_rollout: list[int] = []
    killed_verifier: list[int] = []
    monkeypatch.setattr(ray_workers, "fan_out", _killing(ray_pool.fan_out, killed_rollout))
    monkeypatch.setattr(ray_pool, "fan_out", _killing(ray_pool.fan_out, killed_verifier))
    run, pools = _train_on_ray(tmp_path, sharded_reference.overrides + ray_overrides(ray_cluster.address, 2))

    assert killed_rollout and killed_verifier
    assert pools.rollout.retried >= 1 and pools.verify.retried >= 1
    assert killed_rollout[0] not in pools.pids  # Ray restarted the worker: a new process
    _assert_same_results(run, sharded_reference.run, 2)


@pytest.mark.slow  # starts a local Ray cluster: CI's second step (make test-slow)
def test_a_worker_dead_past_its_retries_is_one_line(ray_cluster, sharded_reference, tmp_path, monkeypatch):
    """cluster.shard_retries=0 and a rollout worker killed -9 under its shard: the run stops with ONE
    line that names the worker, its pid and node, how it ended, its log (a file here) and the rerun;
    the log's tail under it, as `ts` prints a ProcessDied."""
    from thinking_seeds.data import ray_pool
    from thinking_seeds.data.ray_died import RayWorkerDied
    from thinking_seeds.engine import ray_workers
    from thinking_seeds.flows.cli.errors import is_user_error, user_error_text

    killed: list[int] = []
    monkeypatch.setattr(ray_workers, "fan_out", _killing(ray_pool.fan_out, killed))
    overrides = sharded_reference.overrides + ray_overrides(ray_cluster.address, 1) + ["cluster.shard_retries=0"]
    with pytest.raises(RayWorkerDied) as caught:
        _train_on_ray(tmp_path, overrides)
    line, _ = user_error_text(caught.value)
    assert is_user_error(caught.value) and "\n" not in line
    assert "died on shard " in line and "(tried 1 time)" in line and "`ts plan`" in line, line
    assert "rerun the same command to resume the run" in line, line
    if " is unavailable: " in line:
        # Ray's ActorUnavailableError came first (its RPC to the restarting worker broke; seen in 1 CI run):
        # it names neither class nor pid, and the line says Ray's reason as it is
        assert line.startswith("Ray worker died on shard "), line
        return
    assert f"Ray worker RolloutWorker (pid {killed[0]}, on " in line, line
    assert "its process exited unexpectedly" in line, line
    log = line.split("full log: ")[1].split(";")[0]
    assert Path(log).is_file() and log.endswith(f"-{killed[0]}.err"), line


@pytest.mark.slow  # starts a local Ray cluster: CI's second step (make test-slow)
def test_a_checkpoint_the_workers_cannot_see_is_one_line(ray_cluster, sharded_reference, tmp_path):
    from thinking_seeds.config import load_config
    from thinking_seeds.data.ray_pool import connect
    from thinking_seeds.engine.ray_workers import RayRolloutPool
    from thinking_seeds.engine.rollout import SamplingParams
    from thinking_seeds.engine.sharding import generate_sharded

    cfg = load_config("tiny", sharded_reference.overrides + ray_overrides(ray_cluster.address, 1))
    pool = RayRolloutPool(connect(ray_cluster.address), sharded_reference.run.policy(0), cfg, 1)
    try:
        with pytest.raises(ValueError, match="is not visible to the Ray rollout worker on .*TS_RUNS_DIR"):
            generate_sharded(pool, tmp_path / "elsewhere", [[3, 4]], SamplingParams(max_new_tokens=2))
    finally:
        pool.close()


@pytest.mark.slow  # starts a local Ray cluster: CI's second step (make test-slow)
def test_two_nodes_share_the_shards(ray_cluster, sharded_reference, tmp_path):
    """A second node joins with the documented `ray start --address HEAD:PORT`; one worker runs on each
    node (Ray's SPREAD), and the results are still the single-process run's."""
    import time

    from thinking_seeds.data.ray_pool import connect
    from thinking_seeds.pipeline import session

    ray = connect(ray_cluster.address)
    session.close_ray_pools()
    node = join_local_node(ray_cluster, _env(), num_cpus=2)
    try:
        end = time.monotonic() + 120
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            assert time.monotonic() < end, ray_cluster.log_tail()
            time.sleep(1)
        overrides = sharded_reference.overrides + ray_overrides(ray_cluster.address, 2) + ["cluster.worker_cpus=1.0"]
        run, pools = _train_on_ray(tmp_path, overrides)
        assert len(set(pools.nodes)) == 2
        _assert_same_results(run, sharded_reference.run, 2)
    finally:
        session.close_ray_pools()
        stop_node(node)


@pytest.mark.slow
def test_driver_killed_in_seeds_resumes_under_prefect(
    ray_cluster, sharded_reference, runs_dir, subprocess_env, tmp_path
):
    """kill -9 of the Prefect flow's process (the Ray driver) in the seeds stage of iteration 1, on 2
    workers: the rerun skips what was done and ends with the single-process run's results."""
    ref = SimpleNamespace(
        run=sharded_reference.run, overrides=sharded_reference.overrides + ray_overrides(ray_cluster.address, 2)
    )
    kill_and_resume("flow", "seeds:1", ref, runs_dir, subprocess_env, tmp_path)


@pytest.mark.slow
def test_the_documented_driver_command(ray_cluster, sharded_reference, runs_dir, subprocess_env):
    """docs/scaling.md's driver line, `RAY_ADDRESS=HEAD:PORT ts train --preset tiny --run-id tiny --set
    cluster.kind=ray --set rollout.workers=2 --set reward.workers=2` (a Prefect flow; the words are
    tests/helpers/ray_cluster.driver_args, which tests/unit/test_scaling_docs.py finds in the docs), plus
    the tiny run's overrides and half a CPU per actor: the single-process run's results."""
    from thinking_seeds.store.run_dir import RunDir

    env = {**subprocess_env, "RAY_ADDRESS": ray_cluster.address}
    args = driver_args(sharded_reference.overrides + ["cluster.worker_cpus=0.5"])  # the docs' line, then ours
    p = subprocess.run(
        [str(Path(sys.executable).parent / "ts"), *args], env=env, capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert sharded_reference.run.run_id == DRIVER_RUN_ID  # rows carry the run id
    _assert_same_results(RunDir.for_run(DRIVER_RUN_ID, runs_dir), sharded_reference.run, 2)


# ------------------------------------------------------------------ a user's mistakes: one line, exit 2
def test_cluster_mistakes_are_one_clear_line(monkeypatch):
    from thinking_seeds.data import ray_pool

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ray_pool.ClusterError, match="cluster.address=HOST:PORT or RAY_ADDRESS"):
        ray_pool.cluster_address(None)
    with pytest.raises(ray_pool.ClusterError, match="no Ray cluster answers at 127.0.0.1:1"):
        ray_pool._check_reachable("127.0.0.1:1")
    with pytest.raises(ray_pool.ClusterError, match="not HOST:PORT"):
        ray_pool._check_reachable("nowhere")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ray_pool.ClusterError, match=r"pip install 'thinking-seeds\[ray\]'"):
        ray_pool.ray_module()


@pytest.mark.slow  # a whole `ts train` process (~8 s); the error itself: test_cluster_mistakes_are_one_clear_line
def test_unreachable_cluster_exits_2_in_one_line(runs_dir, subprocess_env, tiny_overrides):
    env = {**subprocess_env, "RAY_ADDRESS": "127.0.0.1:1"}
    sets = [f"--set={o}" for o in tiny_overrides + ["cluster=ray"]]
    p = subprocess.run(
        [str(Path(sys.executable).parent / "ts"), "train", "--no-prefect", "--run-id", "ray-down", *sets],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "no Ray cluster answers at 127.0.0.1:1" in lines[0], p.stderr
