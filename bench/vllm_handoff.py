"""vLLM weight load: from a checkpoint folder against from memory (issue #25 item 1).

    .venv-vllm/bin/python bench/vllm_handoff.py [--model data/models/smollm2-135m-chainsum] [--rounds 3]

One in-process VLLMEngine on MODEL. Two policies alternate so that every call is a real swap: θ_a
(MODEL's own folder, read by vLLM's `reload_weights(weights_path=...)`, the page cache warm after the
first round) and θ_b (MODEL's tensors + small noise, published in transports/live_weights.py as the trainer
does, fed to `reload_weights(weights_iterator=...)`). Interleaved: memory, file, memory, file, ...
Prints seconds per load of each side, GB/s and the ratio memory / file per round.

Without the in-memory path the pipeline also had to write θ_b as a file first (save_pretrained, fsync,
sha256: `disk write` below, measured once per round), which the memory side never pays.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "data/models/smollm2-135m-chainsum")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not (a.model / "config.json").is_file():
        raise SystemExit(f"no model at {a.model}: build it with `python -m thinking_seeds.train.smollm2 --warmup`")
    torch.set_num_threads(1)
    from thinking_seeds.config import load_config
    from thinking_seeds.engine.models import load_model
    from thinking_seeds.engine.vllm_engine import VLLMEngine
    from thinking_seeds.store.checkpoints import save_checkpoint
    from thinking_seeds.transports import live_weights

    model, tok = load_model(a.model)
    g = torch.Generator().manual_seed(0)
    state = {k: v.detach().clone() + 1e-4 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}
    gb = sum(v.numel() * v.element_size() for v in state.values()) / 1e9
    engine = VLLMEngine(a.model, load_config("smollm2", [f"model.path={a.model}"]))
    tmp = Path(tempfile.mkdtemp(prefix="ts-vllm-handoff-"))
    live = tmp / "policy" / "step_000001"
    times: dict[str, list[float]] = {"file": [], "memory": [], "disk write": []}
    try:
        for r in range(a.rounds):
            # memory first: the engine starts on MODEL, so a file load first would be a no-op
            live_weights.publish(live, f"round-{r}", state)
            t = time.perf_counter()
            engine.load_weights(live)
            times["memory"].append(time.perf_counter() - t)
            t = time.perf_counter()
            engine.load_weights(a.model)
            times["file"].append(time.perf_counter() - t)
            t = time.perf_counter()
            save_checkpoint(model, tok, tmp / f"written_{r}", step=1)
            times["disk write"].append(time.perf_counter() - t)
            print(
                f"round {r}: file {times['file'][-1]:.3f} s, memory {times['memory'][-1]:.3f} s, "
                f"ratio memory/file {times['memory'][-1] / times['file'][-1]:.2f}; "
                f"disk write {times['disk write'][-1]:.3f} s",
                flush=True,
            )
    finally:
        engine.close()
        live_weights.clear()
    print(f"{a.model.name}: {gb:.2f} GB of weights; medians over {a.rounds} rounds")
    for side, ts in times.items():
        m = statistics.median(ts)
        print(f"  {side:10s} {m:7.3f} s  {gb / m:6.2f} GB/s")
    ratios = [m / f for m, f in zip(times["memory"], times["file"], strict=True)]
    print(f"  memory / file per round: {', '.join(f'{x:.2f}' for x in ratios)}")


if __name__ == "__main__":
    main()
