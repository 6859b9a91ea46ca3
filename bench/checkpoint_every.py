"""A Thinking Seeds iteration with θ written every step (checkpoint.every=1: the design before) vs θ
in memory between checkpoints (checkpoint.every=N), on a random Llama of a chosen size.

    python bench/checkpoint_every.py [--hidden 512 --layers 8] [--iterations 6] [--rounds 2]
        [--every 10] [--launchers in_process,accelerate] [--set KEY=VALUE ...]

Each round runs both settings per launcher, interleaved (the order turned every round), with the
plain loop on a small rollout (so the model's size, not sampling, dominates what changes), and
prints per setting the median over iterations 1.. of the iteration's wall time and of the update
stage's, and the ratio of N to 1. pool.snapshot_every is set above the iterations, so only the end
forces a checkpoint: what is measured is checkpoint.every itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def build_model(path: Path, hidden: int, layers: int) -> tuple[Path, int]:
    import torch

    from thinking_seeds.data.chain_sum import CHARSET
    from thinking_seeds.engine.models import char_tokenizer, tiny_llama

    tok = char_tokenizer(CHARSET)
    torch.manual_seed(0)
    heads = max(1, hidden // 64)
    model = tiny_llama(
        len(tok),
        tok.pad_token_id,
        tok.eos_token_id,
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=hidden * 11 // 4,
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, sum(p.numel() for p in model.parameters())


def one_run(root: Path, model: Path, every: int, launcher: str, iterations: int, extra: list[str]):
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import train
    from thinking_seeds.store.run_dir import RunDir

    overrides = [
        f"model.path={model}",
        f"iterations={iterations}",
        f"checkpoint.every={every}",
        f"pool.snapshot_every={iterations + 1}",
        f"update.launcher={launcher}",
        "rollout.prompts_per_iteration=4",
        "rollout.max_new_tokens=16",
        "data.train_size=50",
        "data.val_size=8",
        "data.test_size=8",
        f"eval.every={iterations + 1}",
        "eval.prompts=2",
        "eval.samples=1",
        "eval.seeded=false",
        *extra,
    ]
    cfg = load_config("tiny", overrides)
    ends: dict[int, float] = {}
    update_s: dict[int, float] = {}

    def on_stage(k, stage, m):
        if stage == "update":
            update_s[k] = sum(m.seconds.values())
        if stage == "evaluate" and k >= 0:
            ends[k] = time.perf_counter()

    run = RunDir.for_run(f"e{every}-{launcher}", root)
    train(run, cfg, on_stage=on_stage)
    walls = [ends[k] - ends[k - 1] for k in range(1, iterations)]
    return walls, [update_s[k] for k in range(1, iterations)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--launchers", default="in_process,accelerate")
    ap.add_argument("--set", dest="extra", action="append", default=[])
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ts-bench-ckpt-"))
    try:
        model, n = build_model(tmp / "model", a.hidden, a.layers)
        mb = n * 4 / 2**20
        print(f"random Llama: {n / 1e6:.1f}M parameters ({mb:.0f} MB fp32; with AdamW {3 * mb:.0f} MB)")
        res: dict[tuple[str, int], tuple[list, list]] = {}
        settings = [(lau, e) for lau in a.launchers.split(",") for e in (1, a.every)]
        for r in range(a.rounds):
            for lau, e in settings if r % 2 == 0 else settings[::-1]:
                walls, upd = one_run(tmp / f"round{r}", model, e, lau, a.iterations, a.extra)
                w, u = res.setdefault((lau, e), ([], []))
                w += walls
                u += upd
                print(f"round {r} {lau} checkpoint.every={e}: iteration {statistics.median(walls):.3f} s", flush=True)
        for lau in a.launchers.split(","):
            (w1, u1), (wn, un) = res[(lau, 1)], res[(lau, a.every)]
            m1, mn = statistics.median(w1), statistics.median(wn)
            print(
                f"{lau}: iteration {m1:.3f} s (every=1) vs {mn:.3f} s (every={a.every}), ratio {mn / m1:.3f}; "
                f"update stage {statistics.median(u1):.3f} vs {statistics.median(un):.3f} s"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
