"""What a rollout worker pays to swap weights by checkpoint path (issue #14 item 4; docs/scaling.md).

    python bench/weight_swap.py [--hidden 768 --layers 12] [--repeat 3]

Writes two random checkpoints of one Llama shape (`save_pretrained`: safetensors) and times
`HFEngine.load_weights` alternating between them (each call is a real swap: the engine keeps the last
one loaded), the same call a Ray rollout worker makes on every shard whose checkpoint it does not hold.
The files were just written, so they come from the page cache: the figure is the swap's floor (read +
`load_state_dict`), not a network filesystem's read rate. Prints seconds per swap and GB/s.

    python bench/weight_swap.py --ray [--checkpoints 3]

also starts a local Ray cluster (tests/helpers/ray_cluster.py) and times one rollout worker's swaps
through `RayRolloutPool` with cluster.weights=path and =object_store, over `--checkpoints` distinct
checkpoints visited twice: the first visit of each pays the object store (the driver's `ray.put`, the
worker's fetch and write to its own disk), the second loads the worker's copy. Worker-side seconds are
the `weight_swap` the workers report; the driver's `ray.put` is `weight_ship`.

    python bench/weight_swap.py --ray --nodes 2

puts the worker on a second Ray node (a head with no CPUs, and a node joined with `ray start --address`,
as tests/integration/test_ray.py's two-node test does): the driver's `ray.put` lands in the head's object
store and the worker's node pulls it from there, so object_store's first visit pays Ray's node-to-node
transfer (here over loopback, not a network). `path` still reads this machine's page cache: a shared
filesystem's read rate is not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ray", action="store_true")
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--nodes", type=int, choices=(1, 2), default=1, help="--ray: the worker on a second node")
    a = ap.parse_args()

    import torch

    from thinking_seeds.data.chain_sum import CHARSET
    from thinking_seeds.engine.models import char_tokenizer, count_params, tiny_llama
    from thinking_seeds.engine.rollout import HFEngine

    torch.set_num_threads(1)
    tok = char_tokenizer(CHARSET)
    base = Path(tempfile.mkdtemp(prefix="ts-swap-"))
    dirs = []
    for seed in range(max(2, a.checkpoints) if a.ray else 2):
        m = tiny_llama(
            a.vocab,
            tok.pad_token_id,
            tok.eos_token_id,
            hidden=a.hidden,
            layers=a.layers,
            heads=a.hidden // 64,
            intermediate=a.hidden * 8 // 3 // 64 * 64,
            seed=seed,
        )
        d = base / f"ckpt{seed}"
        m.save_pretrained(d)
        tok.save_pretrained(d)
        dirs.append(d)
    engine = HFEngine(m, tok)
    size = sum(f.stat().st_size for f in dirs[0].glob("*.safetensors"))
    times = []
    for i in range(2 * a.repeat):
        t = time.perf_counter()
        engine.load_weights(dirs[i % 2])
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(
        json.dumps(
            {
                "params": count_params(m),
                "bytes": size,
                "swap_s_median": med,
                "swap_s_all": times,
                "GB_per_s": size / med / 1e9,
            }
        )
    )
    if a.ray:
        ray_swaps(dirs[: a.checkpoints], size, a.nodes)


def ray_swaps(dirs: list[Path], size: int, nodes: int = 1) -> None:
    from tests.helpers.ray_cluster import join_local_node, start_local_cluster
    from thinking_seeds.config import RunConfig
    from thinking_seeds.data.ray_pool import connect
    from thinking_seeds.engine.ray_workers import RayRolloutPool
    from thinking_seeds.engine.rollout import SamplingParams
    from thinking_seeds.engine.sharding import generate_sharded

    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    cluster = start_local_cluster(env, num_cpus=2 if nodes == 1 else 0)  # 2 nodes: no worker fits the head
    try:
        if nodes == 2:
            join_local_node(cluster, env, num_cpus=2)
        ray = connect(cluster.address)
        if nodes == 2:  # which node the driver (and so its ray.put) sits on: the head, not the worker's
            for _ in range(240):
                if sum(n["Alive"] for n in ray.nodes()) == 2:
                    break
                time.sleep(0.5)
            here = ray.get_runtime_context().get_node_id()
            cpus = {n["NodeID"]: n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]}
            print(json.dumps({"nodes_alive": len(cpus), "driver_node_cpus": cpus.get(here)}), flush=True)
        for mode in ("path", "object_store"):
            cfg = RunConfig(cluster={"kind": "ray", "address": cluster.address, "weights": mode}, device="cpu")
            pool = RayRolloutPool(ray, dirs[0], cfg, 1)
            rows = []
            for visit in (1, 2):
                for d in dirs:
                    before = pool.worker_seconds.get("weight_swap", 0.0)
                    timer = _Timer()
                    generate_sharded(pool, d, [[3, 4]], SamplingParams(max_new_tokens=1), timer=timer)
                    swap = pool.worker_seconds["weight_swap"] - before
                    rows.append(
                        {"visit": visit, "worker_swap_s": swap, "driver_ship_s": timer.s.get("weight_ship", 0.0)}
                    )
            pool.close()
            print(json.dumps({"mode": mode, "nodes": nodes, "bytes": size, "swaps": rows}), flush=True)
    finally:
        import ray as ray_module

        ray_module.shutdown()
        cluster.stop()


class _Timer:
    """Seconds per name, like the pipeline's Timer (engine/sharding.TimerLike)."""

    def __init__(self) -> None:
        self.s: dict[str, float] = {}

    def __call__(self, name: str):
        from contextlib import contextmanager

        @contextmanager
        def timed():
            t = time.perf_counter()
            try:
                yield
            finally:
                self.s[name] = self.s.get(name, 0.0) + time.perf_counter() - t

        return timed()


if __name__ == "__main__":
    main()
