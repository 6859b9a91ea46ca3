"""cluster=ray on this machine (issue #14 item 5): one iteration's wall time with the single-process path,
1 and 2 Ray rollout workers, and the per-component rates docs/scaling.md reports.

    python bench/ray_scale.py [--iterations 3] [--batch-sizes 128,32] [--json out.json] [--set KEY=VALUE ...]

Starts a local Ray cluster exactly as the tests do (`ray start --head --num-cpus 2 --port <free>`,
tests/helpers/ray_cluster.py), trains the tiny preset (builtin:tiny) with the plain loop in this
process once per (batch size, path), and stops the cluster. Iteration 0 pays the workers' start-up
(model load in each actor) and is reported apart; the iteration figure is the median of the later
ones, evaluation excluded (it samples on the driver in every path). Per stage it reads the manifests:

  samples/s per worker   continuation rows / the workers' own generation seconds (local: the engine's)
  fan-out overhead       the stage's generation wall time minus the slowest worker's share
  verifications/s        verify rows / its verification wall time
  update tokens/s        response tokens of the iteration's rollouts / the update stage's seconds
  weight swap            the workers' load_weights seconds per shard (by checkpoint path, page cache warm)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ("seeds", "continuation", "verify", "update")


def run_once(label: str, overrides: list[str], base: Path) -> dict:
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.parquet_io import read_table
    from thinking_seeds.store.run_dir import RunDir

    cfg = load_config("tiny", overrides)
    run = RunDir.for_run(label, base)
    marks: list[tuple[int, str, float]] = []
    t0 = time.perf_counter()
    train(run, cfg, on_stage=lambda k, stage, m: marks.append((k, stage, time.perf_counter())))
    total = time.perf_counter() - t0
    durations: dict[int, dict[str, float]] = {}
    prev = t0
    for k, stage, t in marks:
        durations.setdefault(k, {})[stage] = t - prev
        prev = t
    per_iter = {k: sum(v for s, v in d.items() if s != "evaluate") for k, d in durations.items() if k >= 0}
    later = [per_iter[k] for k in sorted(per_iter) if k >= 1]
    out = {"label": label, "total_s": total, "iter0_s": per_iter.get(0), "iter_median_s": statistics.median(later)}
    rates = []
    for k in range(1, cfg.iterations):
        cont, ver, upd = (run.read_manifest(k, s) for s in ("continuation", "verify", "update"))
        rows = read_table(run.rollouts(k)).to_pydict()
        n = len(rows["token_ids"])
        tokens = sum(len(t) for t in rows["token_ids"])
        workers = cfg.rollout.workers if cfg.cluster.kind == "ray" else 1
        worker_gen = cont.seconds.get("workers_generation", cont.seconds.get("generation", 0.0))
        wall_gen = cont.seconds.get("generation", 0.0)
        rates.append(
            {
                "samples_per_s_per_worker": n / worker_gen if worker_gen else None,
                "stage_samples_per_s": n / wall_gen if wall_gen else None,
                # the wall time beyond the workers' own generation, were it spread evenly over the busy workers
                "fanout_overhead_s": (
                    wall_gen - worker_gen / min(workers, -(-n // cfg.rollout.batch_size))
                    if cfg.cluster.kind == "ray"
                    else 0.0
                ),
                "swap_s_per_shard": (
                    cont.seconds.get("workers_weight_swap", cont.seconds.get("weight_swap", 0.0))
                    / max(1, -(-n // cfg.rollout.batch_size))
                ),
                "verifications_per_s": n / ver.seconds["verification"] if ver.seconds.get("verification") else None,
                "update_tokens_per_s": tokens / sum(upd.seconds.values()),
                "stage_s": {
                    s: sum(v for key, v in run.read_manifest(k, s).seconds.items() if not key.startswith("workers_"))
                    for s in STAGES
                },
            }
        )
    for key in (
        "samples_per_s_per_worker",
        "stage_samples_per_s",
        "fanout_overhead_s",
        "swap_s_per_shard",
        "verifications_per_s",
        "update_tokens_per_s",
    ):
        vals = [r[key] for r in rates if r[key] is not None]
        out[key] = statistics.median(vals) if vals else None
    out["stage_s"] = {s: statistics.median(r["stage_s"][s] for r in rates) for s in STAGES}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--batch-sizes", default="128,32")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--reverse", action="store_true", help="run the paths in the reverse order (ray-2 first)")
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        help="a config override for every path (e.g. update.launcher=in_process, pipeline.overlap=false)",
    )
    a = ap.parse_args()

    from tests.helpers.ray_cluster import start_local_cluster
    from thinking_seeds.pipeline.session import close_ray_pools

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    t = time.perf_counter()
    cluster = start_local_cluster(env, num_cpus=2)
    startup = time.perf_counter() - t
    results = {
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "cluster_start_s": startup,
        "sets": a.sets,
        "runs": [],
    }
    base = Path(tempfile.mkdtemp(prefix="ts-ray-bench-"))
    try:
        for bs in [int(x) for x in a.batch_sizes.split(",")]:
            common = [
                f"iterations={a.iterations}",
                f"rollout.batch_size={bs}",
                "eval.every=1000",
                "eval.prompts=4",
                "eval.samples=1",
                *a.sets,
            ]
            paths = [("local", [])]
            for w in (1, 2):
                paths.append(
                    (
                        f"ray-{w}",
                        [
                            "cluster.kind=ray",
                            f"cluster.address={cluster.address}",
                            "cluster.worker_cpus=0.5",
                            f"rollout.workers={w}",
                            f"reward.workers={w}",
                        ],
                    )
                )
            for name, extra in reversed(paths) if a.reverse else paths:
                close_ray_pools()
                r = run_once(f"{name}-bs{bs}", common + extra, base)
                r["batch_size"], r["path"] = bs, name
                results["runs"].append(r)
                print(json.dumps(r), flush=True)
    finally:
        close_ray_pools()
        import ray

        ray.shutdown()
        cluster.stop()
    results["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}))


if __name__ == "__main__":
    main()
