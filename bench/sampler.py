"""One decode step's token draw: the HF engine's sampler (engine/sampling.py) against torch.multinomial.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sampler.py [--rounds 7] [--rows 32,128] [--vocab 49152,151936]

For each (rows, vocabulary) it times, interleaved over rounds (the order turned each round), one draw of
a token per row from softmax(random logits):

  multinomial   torch.multinomial(probs, 1, generator): the engine's draw before 2026-12-07 (for one
                sample per row torch draws an exponential per (row, vocabulary entry) and takes an argmax)
  sample_rows   engine/sampling.py: one float64 uniform per row through the row's cumulative sum in
                float64 (what the engine does now, so that a row's draw does not depend on which rows
                are left)

Prints each side's median milliseconds and the ratio sample_rows / multinomial, per round and its median.
The log-softmax and exp that both sides share are not timed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    import torch

    from thinking_seeds.engine.sampling import sample_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rows", default="32,128", help="comma-separated batch rows")
    ap.add_argument("--vocab", default="49152,151936", help="comma-separated vocabulary sizes")
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"threads {torch.get_num_threads()}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    gen = torch.Generator().manual_seed(0)
    for rows in (int(x) for x in a.rows.split(",")):
        for vocab in (int(x) for x in a.vocab.split(",")):
            probs = torch.softmax(torch.randn(rows, vocab, generator=gen), -1)
            sides = {
                "multinomial": lambda p=probs: torch.multinomial(p, 1, generator=gen),
                "sample_rows": lambda p=probs: sample_rows(p, torch.rand(len(p), generator=gen, dtype=torch.float64)),
            }
            times: dict[str, list[float]] = {k: [] for k in sides}
            for r in range(a.rounds):
                for name in list(sides)[r % 2 :] + list(sides)[: r % 2]:
                    sides[name]()  # warm
                    t = time.perf_counter()
                    for _ in range(5):
                        sides[name]()
                    times[name].append((time.perf_counter() - t) / 5 * 1000)
            ratios = [s / m for s, m in zip(times["sample_rows"], times["multinomial"], strict=True)]
            mult, ours = statistics.median(times["multinomial"]), statistics.median(times["sample_rows"])
            print(
                f"rows {rows:4d} vocab {vocab:7d}: multinomial {mult:7.1f} ms, sample_rows {ours:7.1f} ms, "
                f"ratio {statistics.median(ratios):.3f}x (per round: {', '.join(f'{x:.3f}' for x in ratios)})"
            )


if __name__ == "__main__":
    main()
