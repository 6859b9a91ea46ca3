"""What a rollout worker pays to swap weights by checkpoint path (issue #14 item 4; docs/scaling.md).

    python bench/weight_swap.py [--hidden 768 --layers 12] [--repeat 3]

Writes two random checkpoints of one Llama shape (`save_pretrained`: safetensors) and times
`HFEngine.load_weights` alternating between them (each call is a real swap: the engine keeps the last
one loaded), the same call a Ray rollout worker makes on every shard whose checkpoint it does not hold.
The files were just written, so they come from the page cache: the figure is the swap's floor (read +
`load_state_dict`), not a network filesystem's read rate. Prints seconds per swap and GB/s.
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
    a = ap.parse_args()

    import torch

    from thinking_seeds.data.chain_sum import CHARSET
    from thinking_seeds.engine.models import char_tokenizer, count_params, tiny_llama
    from thinking_seeds.engine.rollout import HFEngine

    torch.set_num_threads(1)
    tok = char_tokenizer(CHARSET)
    base = Path(tempfile.mkdtemp(prefix="ts-swap-"))
    dirs = []
    for seed in (0, 1):
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


if __name__ == "__main__":
    main()
