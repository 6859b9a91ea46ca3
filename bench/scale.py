"""What the pipeline itself costs per iteration as the model grows: random Qwen2 models of ~40M, ~150M
and ~500M parameters, run through `ts train` for a few iterations, one code tree against another.

    python bench/scale.py [--sizes 40M,150M,500M] [--methods grpo,thinking_seeds] [--iterations 4]
        [--rounds 1] [--old-python /path/to/old/tree/.venv/bin/python] [--no-prefect] [--set KEY=VALUE ...]

The models are built in code (random weights, Qwen2 architecture, the bundled tiny model's character
tokenizer, fp32), once per size, under --models-dir. Random weights sample garbage, so rewards are 0 and
the update still does its full forward/backward/optimizer work on every token: the point is the
pipeline's cost, not learning. Batches are tiny (4 prompts x 2 samples, 32 new tokens) so a 500M model's
iteration fits a CPU core.

Each (size, method, tree) run is a subprocess (`python -m thinking_seeds.flows.cli train`), interleaved:
for every size and round the trees and methods alternate, so a slow stretch of the machine hits both.
Per iteration (iterations 1..n-1; iteration 0 launches the trainer) it reads the manifests:

  wall        iteration wall time (end of iteration k-1's last stage to the end of k's)
  work        sampling (seeds + continuation generation), forward/backward/optimizer, verification
  own         wall - work: the pipeline's own cost (checkpoints, weight hand-over, Parquet, manifests,
              orchestration)
  ckpt        seconds the stages report for checkpoint writes/loads (parts named *checkpoint*, *save*,
              *load*, io) on the critical path
  share       own / wall

and polls the whole process tree's resident memory every 0.2 s: the peak of the sum, and each process's
peak by role (main, prefect server, trainer, verifier workers, other). RSS counts shared pages once per
process, so the sum overstates what the tree holds when processes share weights.

`--old-python` names the interpreter of another checkout (its venv with that tree installed editable):
its runs are labelled `old`, this checkout's `new`; without it only `new` runs. The goal the issue sets:
own cost at 500M <= 1.3x own cost at 40M (new tree).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

# hidden, intermediate, layers, heads, kv heads: about 40M / 150M / 500M parameters with a 39-token vocabulary.
SIZES = {
    "40M": (512, 1536, 12, 8, 2),
    "150M": (1024, 2816, 12, 16, 4),
    "500M": (1536, 4096, 18, 12, 2),
}
TINY_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def build_model(size: str, models_dir: Path) -> Path:
    """A random Qwen2 of `size` with the tiny model's tokenizer, saved once (fp32 safetensors)."""
    out = models_dir / f"qwen2-{size}"
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from thinking_seeds.engine.models import resolve_model_path

    tiny = resolve_model_path("builtin:tiny")
    h, inter, layers, heads, kv = SIZES[size]
    tiny_cfg = json.loads((tiny / "config.json").read_text())
    cfg = Qwen2Config(
        vocab_size=tiny_cfg["vocab_size"],
        hidden_size=h,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=256,
        bos_token_id=tiny_cfg["bos_token_id"],
        eos_token_id=tiny_cfg["eos_token_id"],
        pad_token_id=tiny_cfg["pad_token_id"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(torch.float32)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for name in TINY_TOKENIZER_FILES:
        if (tiny / name).exists():
            shutil.copy2(tiny / name, tmp / name)
    tmp.rename(out)
    return out


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def role_of(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    if "prefect" in text and "server" in text:
        return "prefect server"
    if "trainer_server" in text or "accelerate" in text:
        return "trainer"
    if "multiprocessing" in text or "spawn" in text or "verifier" in text:
        return "workers"
    return "other"


class TreeMemory:
    """Polls a process tree's RSS: the peak of the sum, and each role's peak (main = the root)."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.every = every
        self.peak_total = 0
        self.peak_by_role: dict[str, int] = {}
        self.max_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                return
            total, by_role = 0, {}
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    role = "main" if p.pid == self.root.pid else role_of(p.cmdline())
                except psutil.Error:
                    continue
                total += rss
                by_role[role] = by_role.get(role, 0) + rss
            self.peak_total = max(self.peak_total, total)
            self.max_procs = max(self.max_procs, len(procs))
            for role, rss in by_role.items():
                self.peak_by_role[role] = max(self.peak_by_role.get(role, 0), rss)
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


CKPT_PARTS = ("checkpoint", "save", "load", "handoff", "weights")


def iteration_rows(run_root: Path, iterations: int) -> list[dict]:
    """Per-iteration figures of iterations 1..n-1 from the manifests (see the module docstring)."""
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir(run_root)
    ends = [run.manifest_path(k, "evaluate").stat().st_mtime for k in range(-1, iterations)]
    rows = []
    for k in range(1, iterations):
        work = ckpt = 0.0
        for stage in ("snapshot", "seeds", "continuation", "verify", "update", "evaluate"):
            m = run.read_manifest(k, stage)
            if m is None:
                continue
            if stage == "seeds" and m.metrics.get("perf/seeds_ahead"):
                continue  # drafted beside update k-1: off the critical path
            if stage in ("seeds", "continuation"):
                work += m.seconds.get("generation", 0.0)
            work += m.seconds.get("verification", 0.0)
            if stage == "update":
                work += m.metrics.get("perf/fwd_bwd_s", 0.0)
                ckpt += sum(v for name, v in m.metrics.items() if name.startswith("perf/") and _is_ckpt(name))
            ckpt += sum(v for part, v in m.seconds.items() if _is_ckpt(part))
        wall = ends[k + 1] - ends[k]
        rows.append({"wall": wall, "work": work, "own": wall - work, "ckpt": ckpt})
    return rows


def _is_ckpt(name: str) -> bool:
    # "io" only as a whole part name: "generation" and "verification" contain it too.
    return name == "io" or any(p in name for p in CKPT_PARTS)


def run_once(python: str, model_dir: Path, method: str, iterations: int, prefect: bool, extra: list[str], base: Path):
    run_id = f"scale-{model_dir.name}-{method}"
    overrides = [
        f"model.path={model_dir}",
        f"algorithm={method}",
        f"iterations={iterations}",
        "rollout.prompts_per_iteration=4",
        "rollout.group_size=2",
        "rollout.seeds_per_group=1" if method == "thinking_seeds" else "rollout.seeds_per_group=0",
        "rollout.max_new_tokens=32",
        "rollout.batch_size=8",
        # Snapshots are checkpoints: this many iterations apart, the measured ones hand θ over in memory
        # (new tree) where the old tree writes, hashes and reloads it every iteration.
        "pool.snapshot_every=100",
        f"eval.every={iterations + 1}",
        "eval.prompts=1",
        "eval.samples=1",
        "eval.seeded=false",
        *extra,
    ]
    cmd = [python, "-m", "thinking_seeds.flows.cli", "--runs-dir", str(base), "train", "--run-id", run_id]
    cmd += [] if prefect else ["--no-prefect"]
    for o in overrides:
        cmd += ["--set", o]
    t0 = time.perf_counter()
    log = (base / f"{run_id}.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "TS_RUNS_DIR": str(base)})
    mem = TreeMemory(proc.pid)
    rc = proc.wait()
    mem.stop()
    log.close()
    if rc != 0:
        tail = (base / f"{run_id}.log").read_text().splitlines()[-15:]
        raise SystemExit(f"run {run_id} failed (exit {rc}):\n" + "\n".join(tail))
    rows = iteration_rows(base / run_id, iterations)
    out = {
        "total_s": time.perf_counter() - t0,
        "rows": rows,
        "peak_rss_gb": mem.peak_total / 1e9,
        "peak_by_role_gb": {r: v / 1e9 for r, v in sorted(mem.peak_by_role.items())},
        "processes": mem.max_procs,
        "disk_gb": sum(f.stat().st_size for f in (base / run_id).rglob("*") if f.is_file()) / 1e9,
    }
    shutil.rmtree(base / run_id, ignore_errors=True)
    return out


def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="40M,150M,500M")
    ap.add_argument("--methods", default="grpo,thinking_seeds")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--old-python", default=None, help="the interpreter of the tree to compare with (its runs: old)")
    ap.add_argument("--no-prefect", action="store_true", help="the plain loop instead of the Prefect flow")
    ap.add_argument("--models-dir", type=Path, default=Path(tempfile.gettempdir()) / "ts-scale-models")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure here")
    a = ap.parse_args()
    sizes = a.sizes.split(",")
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        raise SystemExit(f"error: unknown --sizes {unknown}; known: {', '.join(SIZES)}")
    trees = [("new", sys.executable)] + ([("old", a.old_python)] if a.old_python else [])
    a.models_dir.mkdir(parents=True, exist_ok=True)
    models = {s: build_model(s, a.models_dir) for s in sizes}
    params = {s: _count(models[s]) for s in sizes}
    print(
        f"bench/scale.py: sizes {', '.join(f'{s}={params[s] / 1e6:.1f}M' for s in sizes)}; "
        f"methods {a.methods}; {a.iterations} iterations x {a.rounds} rounds; trees {[t for t, _ in trees]}; "
        f"{'plain loop' if a.no_prefect else 'Prefect flow'}",
        flush=True,
    )
    results: dict[tuple[str, str, str], list[dict]] = {}
    base = Path(tempfile.mkdtemp(prefix="ts-scale-"))
    try:
        for s, rnd in itertools.product(sizes, range(a.rounds)):
            order = list(itertools.product(trees, a.methods.split(",")))
            if rnd % 2:
                order.reverse()
            for (tree, python), method in order:
                try:
                    r = run_once(python, models[s], method, a.iterations, not a.no_prefect, a.overrides, base)
                except SystemExit as e:  # one failed run (e.g. out of memory) costs its row, not the bench
                    print(f"  {s:>5} {method:<15} {tree}: FAILED, {str(e).splitlines()[0]}", flush=True)
                    continue
                results.setdefault((s, method, tree), []).append(r)
                rows = r["rows"]
                print(
                    f"  {s:>5} {method:<15} {tree}: wall {med(rows, 'wall'):6.2f}s  work {med(rows, 'work'):6.2f}s  "
                    f"own {med(rows, 'own'):6.2f}s  ckpt {med(rows, 'ckpt'):5.2f}s  peak RSS {r['peak_rss_gb']:.2f} GB "
                    f"in {r['processes']} procs {r['peak_by_role_gb']}  run dir {r['disk_gb']:.2f} GB",
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("\nmedians per iteration (iterations 1..n-1 of every round):")
    print("| size | params | method | tree | wall s | own s | ckpt s | own share | peak RSS GB | own / own@smallest |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for (s, method, tree), rs in results.items():
        rows = [row for r in rs for row in r["rows"]]
        smallest = [row for r in results.get((sizes[0], method, tree), rs) for row in r["rows"]]
        own, own0 = med(rows, "own"), med(smallest, "own")
        summary[f"{s}/{method}/{tree}"] = {
            "params": params[s],
            "wall": med(rows, "wall"),
            "own": own,
            "ckpt": med(rows, "ckpt"),
            "peak_rss_gb": max(r["peak_rss_gb"] for r in rs),
            "peak_by_role_gb": rs[-1]["peak_by_role_gb"],
        }
        print(
            f"| {s} | {params[s] / 1e6:.1f}M | {method} | {tree} | {med(rows, 'wall'):.2f} | {own:.2f} | "
            f"{med(rows, 'ckpt'):.2f} | {own / med(rows, 'wall'):.1%} | {max(r['peak_rss_gb'] for r in rs):.2f} | "
            f"{own / own0:.2f}x |"
        )
    if a.old_python:
        print("\nnew / old own cost per iteration:")
        for s, method in itertools.product(sizes, a.methods.split(",")):
            if f"{s}/{method}/new" not in summary or f"{s}/{method}/old" not in summary:
                continue
            n, o = summary[f"{s}/{method}/new"]["own"], summary[f"{s}/{method}/old"]["own"]
            print(f"  {s:>5} {method:<15} {n:.2f}s / {o:.2f}s = {n / o:.2f}x")
    if a.json:
        a.json.write_text(json.dumps(summary, indent=2))


def _count(model_dir: Path) -> int:
    from safetensors import safe_open

    n = 0
    for f in model_dir.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            for key in st.keys():  # noqa: SIM118 - safe_open has no __iter__
                n += _numel(st.get_slice(key).get_shape())
    return n


if __name__ == "__main__":
    main()
