"""The memory plan (`ts plan`, ts_core/train/memory_plan.py) against measured peaks on the CPU.

    python bench/memory_plan.py [--hidden 64,128,256] [--rows 4] [--prompt 64] [--response 128]
        [--layers 2] [--vocab 151936] [--json FILE]

For each hidden size: a random Qwen2 (real vocabulary, V = 151,936 by default; `layers` layers, 4
heads, 2 KV heads, intermediate 4 × hidden, untied embeddings, fp32) is built in a fresh subprocess,
which then runs two optimizer steps of the project's update path (`train/update_loop.train_on_batch`:
micro_loss -> the log-prob path -> backward -> AdamW) on one micro-batch of `rows` random sequences
(`prompt` context tokens, `response` response tokens each). The second step is the steady state:
AdamW's moments are alive during its forward and backward, as in every update of a run.

measured: the subprocess's peak resident memory (ru_maxrss) minus its resident memory just before
the model was built (after the imports): weights + gradients + AdamW + activations + log-prob path +
whatever else the step allocates; once with MALLOC_MMAP_THRESHOLD_=131072 (RSS follows the tensors
alive: the figure the 15% bar is on), once with glibc's default (which keeps freed memory in its arenas;
shown beside it). plan: the trainer process's peak from the planner, computed from the
same config.json and run config (`plan_processes`, trainer rank 0). error = (plan - measured) / measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

VOCAB = 151_936  # Qwen2.5's vocabulary
# glibc raises its mmap threshold (up to 32 MB) after large frees, and then serves big tensors from heap
# arenas it does not give back: RSS then includes freed memory. A fixed threshold makes every block over
# 128 KiB its own mapping, returned when freed, so the peak RSS is that of the tensors alive (what the plan
# counts, and what a GPU's allocator must hold). Both are measured; the bar is on the first.
MMAP_THRESHOLD = 128 * 1024


def run_sets(model_dir: Path, rows: int, response: int, path: str) -> list[str]:
    """The run config of the measured step: one micro-batch of `rows` sequences, one trainer process, the
    log-prob path `path` (plain: the (B, T, V) logits; chunked: through the LM head in chunks)."""
    return [
        f"update.logprob_chunk_size={'null' if path == 'plain' else 0}",
        f"model.path={model_dir}",
        "algorithm=grpo",
        "rollout.seeds_per_group=0",
        "rollout.prompts_per_iteration=1",
        f"rollout.group_size={rows}",
        f"rollout.max_new_tokens={response}",
        f"update.micro_batch_size={rows}",
        "update.max_tokens_per_micro_batch=null",
        "update.mini_batches=1",
        "update.launcher=accelerate",
        "update.num_processes=1",
        "device=cpu",
    ]


def write_model_config(folder: Path, hidden: int, layers: int, vocab: int) -> Path:
    from transformers import Qwen2Config

    cfg = Qwen2Config(
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    folder.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(folder)
    return folder


def measure(model_dir: Path, rows: int, prompt: int, response: int, path: str) -> None:
    """In the subprocess: build the model, two update steps; print the RSS figures as one JSON line."""
    import random
    import resource

    import psutil
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from thinking_seeds.config import load_config
    from thinking_seeds.train.batch import Batch
    from thinking_seeds.train.update_loop import make_optimizer, train_on_batch

    torch.manual_seed(0)
    rng = random.Random(0)
    cfg = load_config("tiny", run_sets(model_dir, rows, response, path))
    conf = AutoConfig.from_pretrained(model_dir)
    ids = lambda n: [rng.randrange(2, conf.vocab_size) for _ in range(n)]  # noqa: E731
    batch = Batch(
        contexts=[ids(prompt) for _ in range(rows)],
        responses=[ids(response) for _ in range(rows)],
        old_logprobs=[[-11.0] * response for _ in range(rows)],
        behaviour_logprobs=[[-11.0] * response for _ in range(rows)],
        prefix_len=[0] * rows,
        seeded=[False] * rows,
        advantages=[1.0 if i % 2 else -1.0 for i in range(rows)],
        source_age=[-1] * rows,
        token_weights=[[] for _ in range(rows)],
    )
    before = psutil.Process().memory_info().rss
    model = AutoModelForCausalLM.from_config(conf).float()
    model.train()
    optimizer = make_optimizer(model, cfg)
    for _ in range(2):
        train_on_batch(model, batch, cfg, 0, optimizer)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({"rss_before_model": before, "peak_rss": peak, "measured": peak - before}))


def plan_bytes(model_dir: Path, rows: int, prompt: int, response: int, path: str) -> dict:
    from thinking_seeds.config import load_config
    from thinking_seeds.train.memory_check import model_shape
    from thinking_seeds.train.memory_plan import plan_processes

    shape = model_shape(model_dir)
    cfg = load_config("tiny", run_sets(model_dir, rows, response, path))
    trainer = next(p for p in plan_processes(shape, cfg, 0, prompt) if p.role == "trainer rank 0")
    return {
        "params": shape.params,
        "plan": trainer.peak,
        "phase": trainer.peak_phase,
        "items": {i.name: i.bytes for i in trainer.items},
    }


def _measured(cmd: list[str], env: dict) -> dict:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if r.returncode != 0:
        raise SystemExit(f"measuring failed: {' '.join(cmd)}\n{(r.stdout + r.stderr)[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", default="64,128,256")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--response", type=int, default=128)
    ap.add_argument("--paths", default="plain,chunked", help="log-prob paths to measure: plain, chunked")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)  # the subprocess's side
    a = ap.parse_args()
    if a.measure is not None:
        measure(a.measure, a.rows, a.prompt, a.response, a.paths)
        return 0
    results = []
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    tensors_env = dict(env, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    print(
        f"{'path':>8} {'hidden':>6} {'params':>12} {'plan GiB':>9} {'measured GiB':>12} {'error':>7}  "
        f"{'glibc default GiB':>17} {'error':>7}  peak phase"
    )
    with tempfile.TemporaryDirectory(prefix="ts-memory-plan-") as tmp:
        for path, h in [(p, int(x)) for p in a.paths.split(",") for x in a.hidden.split(",")]:
            folder = write_model_config(Path(tmp) / f"qwen2-h{h}", h, a.layers, a.vocab)
            cmd = [sys.executable, __file__, "--measure", str(folder), "--rows", str(a.rows), "--paths", path]
            cmd += ["--prompt", str(a.prompt), "--response", str(a.response)]
            m, m_default = _measured(cmd, tensors_env), _measured(cmd, env)
            p = plan_bytes(folder, a.rows, a.prompt, a.response, path)
            err = (p["plan"] - m["measured"]) / m["measured"]
            err_default = (p["plan"] - m_default["measured"]) / m_default["measured"]
            row = {"path": path, "hidden": h, "layers": a.layers, "vocab": a.vocab, "rows": a.rows}
            row.update(prompt=a.prompt, response=a.response, **p, **m, error=err)
            row.update(measured_glibc_default=m_default["measured"], error_glibc_default=err_default)
            results.append(row)
            print(
                f"{path:>8} {h:>6} {p['params']:>12,} {p['plan'] / 2**30:>9.3f} {m['measured'] / 2**30:>12.3f} "
                f"{100 * err:>+6.1f}%  {m_default['measured'] / 2**30:>17.3f} {100 * err_default:>+6.1f}%  {p['phase']}"
            )
    worst = max(abs(r["error"]) for r in results)
    print(f"largest |error| against the tensors alive: {100 * worst:.1f}% (bar: 15%)")
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
