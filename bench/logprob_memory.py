"""Memory of the update's log-prob path per (response token x vocabulary entry), at a real vocabulary.

    python bench/logprob_memory.py [--vocab 151936] [--responses 4] [--tokens 256] [--rounds 3]

One forward + backward of a random 2-layer Qwen2 (hidden 64, no download) through
engine/scoring.score_responses, on the CPU in fp32, as the update runs it: log-probs with gradient,
entropies (with and without gradient). Each measurement is its own process: the model and inputs are
built, the kernel's peak-RSS mark is reset (/proc/self/clear_refs), the pass runs, and the growth of
the peak (VmHWM) over the RSS before the pass is divided by responses x tokens x vocabulary. The
parameters' gradients are allocated before the mark (the model's memory, not the path's), and glibc is
told to return every freed block of 64 KB or more at once (MALLOC_MMAP_THRESHOLD_): otherwise freed
chunks stay in the process and the peak tells the allocator's history. Sides, interleaved in every round:

  full       update.logprob_chunk_size=null: the (B, T, V) logits, softmax and autograd's copies
  chunked    update.logprob_chunk_size=0 (the default): the LM head a chunk at a time, recomputed in
             the backward (engine/token_scores.py)
  ddp        chunked, with the model wrapped in DDP (gloo, one rank), as update.num_processes >= 2
             trains it: the head is found inside the wrapper, the forward runs through it

Prints each side's median bytes per entry and the chunked / full ratio. Linux only (clear_refs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

SIDES = {"full": (None, False), "chunked": (0, False), "ddp": (0, True)}  # (logprob_chunk_size, DDP)


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def measure(vocab: int, responses: int, tokens: int, chunk: int | None, entropy_grad: bool, ddp: bool) -> dict:
    """In this process: bytes of peak-RSS growth of one forward + backward (module docstring)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from thinking_seeds.engine.scoring import score_responses

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=tokens + 64, pad_token_id=0,
    )  # fmt: skip
    model = Qwen2ForCausalLM(cfg).float().train()
    ctx = [[int(x) for x in torch.randint(1, vocab, (32,))] for _ in range(responses)]
    resp = [[int(x) for x in torch.randint(1, vocab, (tokens,))] for _ in range(responses)]
    if ddp:  # its buckets are allocated here, before the mark, like the gradients
        import tempfile

        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/pg", rank=0, world_size=1)
        model = torch.nn.parallel.DistributedDataParallel(model)
    for p in model.parameters():  # the gradients are the model's, not the path's: allocated before
        p.grad = torch.zeros_like(p)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    before = _status("VmRSS")
    sc = score_responses(model, ctx, resp, pad_id=0, chunk_size=chunk, entropy_grad=entropy_grad)
    (sc.logprobs.sum() + 0.01 * sc.entropy.sum()).backward()
    peak = _status("VmHWM")
    entries = responses * tokens * vocab
    return {"growth_bytes": peak - before, "bytes_per_entry": (peak - before) / entries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--responses", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:  # one measurement: side,entropy_grad
        side, eg = a.child.split(",")
        print(json.dumps(measure(a.vocab, a.responses, a.tokens, SIDES[side][0], eg == "1", SIDES[side][1])))
        return
    import torch

    print(f"torch {torch.__version__}, V={a.vocab}, {a.responses} responses x {a.tokens} tokens, fp32 CPU")
    results: dict[str, list[float]] = {}
    for r in range(a.rounds):
        for side in SIDES:
            for eg in ("1", "0"):
                cmd = [sys.executable, __file__, "--child", f"{side},{eg}", "--vocab", str(a.vocab),
                       "--responses", str(a.responses), "--tokens", str(a.tokens)]  # fmt: skip
                # glibc returns a freed block >= this to the kernel at once (its default threshold moves up
                # to 32 MB, so freed chunks would stay in RSS and the peak would tell the allocator's history)
                env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
                out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
                key = f"{side}, entropy {'with' if eg == '1' else 'without'} grad"
                results.setdefault(key, []).append(out["bytes_per_entry"])
                print(f"round {r + 1}: {key:34s} {out['growth_bytes'] / 2**20:8.0f} MiB  "
                      f"{out['bytes_per_entry']:.2f} B/entry", flush=True)  # fmt: skip
    print("median bytes per (response token x vocabulary entry):")
    med = {k: statistics.median(v) for k, v in results.items()}
    for k, v in med.items():
        print(f"  {k:34s} {v:.2f}")
    for eg in ("with", "without"):
        full, ch, ddp = (med[f"{side}, entropy {eg} grad"] for side in SIDES)
        print(f"chunked / full (entropy {eg} grad): {ch / full:.3f}; ddp / full: {ddp / full:.3f}")


if __name__ == "__main__":
    main()
