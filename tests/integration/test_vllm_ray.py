"""vLLM engines inside Ray rollout workers (issue #14): `rollout.engine=vllm` with `cluster.kind=ray`, on CPU.

Runs only in the vLLM environment, which has Ray too (`make vllm-env`, then `make test-vllm`). The test
starts a local Ray cluster from that venv (`ray start --head --num-cpus 2 --port <free>`,
tests/helpers/ray_cluster.py: its workers run this venv's Python, so each rollout actor builds a real
VLLMEngine through `build_engine`) and stops exactly the processes it started.

A 2-iteration Thinking Seeds run on 1 or 2 vLLM rollout workers writes the same prefixes and rollouts,
bit for bit, and trains the same weights, as the single-process run with the driver's own vLLM engine
(cluster=local): every shard of rollout.batch_size=8 requests is one engine batch with its own seed and
vLLM seeds each request (`request_seed`), so which engine runs a shard changes nothing. With 2 workers the
continuation stage's 16 requests are 2 shards, one per worker.

The model is the vLLM tests' tiny random Llama (head_dim 32: vLLM's CPU attention has no kernel for 16);
each engine (the driver's, each actor's) sizes its KV cache from the batch: the engine's floor, 0.25 GiB.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import pytest  # noqa: E402

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")
pytest.importorskip("ray")

from tests.helpers import REPO  # noqa: E402
from tests.helpers.ray_cluster import running_cluster  # noqa: E402
from tests.helpers.resume import _assert_same_results  # noqa: E402
from tests.helpers.vllm_runs import save_tiny, small_run  # noqa: E402

RUN_ID = "vllm-ray"  # a run's rows carry its id: both runs use the same one


def _overrides(base) -> list[str]:
    return small_run(
        base,
        "iterations=2",
        "rollout.batch_size=8",  # 16 continuation requests: 2 shards
        "eval.every=2",
        "loss.entropy_coeff=0.01",  # the weights move even if every advantage is zero
        "update.lr=1e-3",
    )


def _train(root, overrides, then=None):
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    return train(RunDir.for_run(RUN_ID, root), load_config("tiny", overrides), then=then)


def _close_engines() -> None:
    """One vLLM engine at a time in this process (each holds its own KV cache; a run's close stops its own)."""
    from thinking_seeds.pipeline.run_resources import stop_everywhere

    stop_everywhere("engine")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The single-process run (cluster=local): the driver's own vLLM engine."""
    base = save_tiny(tmp_path_factory.mktemp("vllm-ray-model") / "base")
    run = _train(tmp_path_factory.mktemp("vllm-local"), _overrides(base))
    _close_engines()
    return run, _overrides(base)


@pytest.fixture(scope="module")
def ray_cluster():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    with running_cluster(env, num_cpus=2) as cluster:
        yield cluster


@pytest.mark.parametrize("workers", [1, 2])
def test_vllm_rollout_workers_on_ray_give_the_single_process_run(workers, ray_cluster, reference, tmp_path):
    from thinking_seeds.pipeline import session

    session.close_ray_pools()  # fresh actors for each worker count
    ref_run, overrides = reference
    ray_sets = [
        "cluster.kind=ray",
        f"cluster.address={ray_cluster.address}",
        "cluster.worker_cpus=0.5",
        f"rollout.workers={workers}",
        f"reward.workers={workers}",
    ]
    seen: dict = {}

    def look(_cfg):  # in the run's life: the rollout workers the run holds (its close stops them)
        from thinking_seeds.pipeline.run_resources import held_process
        from thinking_seeds.store.run_dir import RunDir

        pool = held_process(RunDir.for_run(RUN_ID, tmp_path), "ray_rollout")
        seen.update(actors=len(pool.actors), pids=pool.pids())
        # Each actor holds a real vLLM engine (not the HF one), and the weights it last loaded.
        seen["kinds"] = pool.ray.get([a.__ray_call__.remote(lambda w: type(w.engine).__name__) for a in pool.actors])
        seen["held"] = pool.ray.get([a.__ray_call__.remote(lambda w: w.engine.loaded_from) for a in pool.actors])

    run = _train(tmp_path, overrides + ray_sets, then=look)

    assert seen["actors"] == workers and len(set(seen["pids"])) == workers and os.getpid() not in seen["pids"]
    assert seen["kinds"] == ["VLLMEngine"] * workers
    # Every worker ran a shard of iteration 1's continuation (16 requests, 2 shards): each holds θ_1's
    # weights, taken from memory ("live|<path>|<policy id>": shipped as tensors, no file of step 1 read).
    held = seen["held"]
    assert all(h.startswith("live|") for h in held), held
    assert [Path(h.split("|")[1]).resolve() for h in held] == [run.policy(1).resolve()] * workers
    for k in range(2):  # the seeds and continuation shards ran on the workers (evaluate: the driver's engine)
        for stage in ("seeds", "continuation"):
            assert run.read_manifest(k, stage).seconds.get("workers_generation", 0) > 0, (k, stage)
    _assert_same_results(run, ref_run, 2)  # prefixes, rollouts, θ_1, θ_2 and the evaluation: bit for bit
    session.close_ray_pools()
    _close_engines()
