"""The device check of issue #16: the plain loop (no Prefect) on a GPU in bf16, and its CPU half.

    python scripts/device_check.py --out DIR [--cpu-only] [--iterations 3]

Cases: grpo and thinking_seeds, each for a few iterations of the plain loop with
`update.mixed_precision=bf16` (bf16 engine, bf16-autocast trainer with fp32 masters, π_old
recomputed by the trainer):
  - on the CPU: the bundled tiny model (builtin:tiny);
  - on CUDA (unless --cpu-only or no GPU): builtin:tiny and a randomly initialised ~100M-parameter
    Llama built here, offline, from a config (the chain_sum character tokenizer; its samples are
    noise that runs to max_new_tokens, which is what a throughput figure wants).
    On CUDA the ~100M model's GRPO also runs with update.launcher=in_process: θ_k reaches the engine as
    the trainer's own device tensors, against the persistent trainer's socket (issue #25's CUDA
    hand-over; `handoff_s_per_iteration` is the continuation stage's weight_swap).
    And a real vocabulary: a random Qwen2 at Qwen2.5's V = 151,936 (Qwen2.5-0.5B's layer shape, 4
    layers, tied embeddings: ~200M parameters, most of them the embedding), its tokenizer the chain_sum
    characters padded with filler tokens to V, 256 new tokens: the update's log-prob path and the
    engine's sampling logits at the size users meet.
    A second real-vocabulary case trains with gradient checkpointing (update.gradient_checkpointing=true:
    the update mode for models of 1B parameters and more), and the ~100M model's GRPO runs once more in
    fp32 (update.mixed_precision=no), the figure bf16 is compared with.
`--only WORD ...` keeps the cases whose model/algorithm/device/launcher/mode holds a word (a second try in
a short GPU lease). The package need not be installed: scripts/checkout_import.py links it from this checkout.
One file of ~415 lines on purpose: it is what a bare GPU machine runs, its meters (GpuSampler, GenMeter)
beside the cases they measure.
Per case: generation tokens/s (every token any engine call sampled, over the time spent in those
calls), update seconds per iteration and per optimizer step, the max |log-prob| difference between
the engine and the trainer on the same tokens (the trainer's recompute), and every process's peak GPU
memory: the pipeline's (torch.cuda.max_memory_allocated here), the trainer's (its own
max_memory_allocated, reported with each update as perf/cuda_max_memory_gib, the max over ranks), and
per process the most nvidia-smi saw it hold (CUDA context and allocator cache included: sampled every
0.5 s) -- beside what `ts plan` expected for each (train/memory_plan.py). All to
DIR/device_check.json; a table on stdout. Exit status 1 if any case failed.

One script past 400 lines on purpose: the device tool runs it whole on a machine lent for minutes, with
the project not installed (scripts/checkout_import.py), so its cases and their report stay in one file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, also when loaded from its file (tests)
from checkout_import import use_checkout  # noqa: E402

# The project need not be installed (a bare GPU machine): the package from this checkout, in this process
# and in every process it starts (the trainer's); docs/scale-up.md "Run on one GPU".
PACKAGE_FROM = use_checkout()

import torch  # noqa: E402

from thinking_seeds.config import load_config  # noqa: E402
from thinking_seeds.engine.rollout import HFEngine  # noqa: E402
from thinking_seeds.pipeline.loop import train  # noqa: E402
from thinking_seeds.store.run_dir import RunDir  # noqa: E402

# ~100M parameters: 12 layers of hidden 768 (4·768² attention + 3·768·2560 MLP each) = 99.6M.
LLAMA_100M = dict(hidden=768, layers=12, heads=12, intermediate=2560, max_positions=512)
# Qwen2.5-0.5B's layer shape and vocabulary, 4 of its 24 layers: 136M embedding (tied) + 4 × 14.9M.
QWEN_VOCAB = 151_936
QWEN2_REAL_VOCAB = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=4,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    vocab_size=QWEN_VOCAB,
)
REAL_VOCAB_RUN = ["rollout.max_new_tokens=256"]  # long enough that the log-prob path is the update's largest item
CHECKPOINTING_RUN = [*REAL_VOCAB_RUN, "update.gradient_checkpointing=true"]
RUN = [
    "eval.every=1000",
    "eval.prompts=8",
    "eval.samples=2",
    "data.train_size=256",
    "data.val_size=16",
    "data.test_size=16",
    "logger=[console]",
]


def build_llama_100m(path: Path) -> int:
    from thinking_seeds.data.chain_sum import CHARSET
    from thinking_seeds.engine.models import char_tokenizer, count_params, tiny_llama

    tok = char_tokenizer(CHARSET)
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, seed=0, **LLAMA_100M)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return count_params(model)


def build_qwen2_real_vocab(path: Path) -> int:
    """A random Qwen2 with Qwen2.5's vocabulary, and a tokenizer of as many entries: the chain_sum
    characters, then filler tokens (what the random model samples decodes to text that scores 0)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from thinking_seeds.data.chain_sum import CHARSET
    from thinking_seeds.engine.models import EOS, PAD, TINY_CHAT_TEMPLATE, count_params

    vocab = {PAD: 0, EOS: 1}
    for ch in sorted(set(CHARSET)):
        vocab.setdefault(ch, len(vocab))
    for i in range(len(vocab), QWEN_VOCAB):
        vocab[f"<f{i}>"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)
    fast.chat_template = TINY_CHAT_TEMPLATE
    fast.padding_side = "left"
    torch.manual_seed(0)
    cfg = Qwen2Config(**QWEN2_REAL_VOCAB, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return count_params(model)


class GpuSampler:
    """Every compute process's GPU memory as nvidia-smi reports it (context and allocator cache included),
    sampled every 0.5 s in a thread: the most each pid held. Nothing when nvidia-smi is missing."""

    def __init__(self, interval: float = 0.5):
        import shutil
        import threading

        self.peaks: dict[int, float] = {}
        self.children: set[int] = set()  # this process's descendants seen while sampling (the trainer's)
        self._stop = threading.Event()
        self._smi = shutil.which("nvidia-smi")
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        if self._smi:
            self._thread.start()

    def _run(self, interval: float) -> None:
        import subprocess

        query = [self._smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        try:
            import psutil  # accelerate's dependency; without it every other pid is reported as 'other'

            me = psutil.Process()
        except ImportError:
            me = None
        while not self._stop.wait(interval):
            try:
                if me is not None:
                    self.children.update(c.pid for c in me.children(recursive=True))
                out = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
            except Exception:  # noqa: BLE001 - a failed sample (a child gone mid-walk, nvidia-smi hung) is skipped
                continue
            for line in out.splitlines():
                parts = [x.strip() for x in line.split(",")]
                if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    pid, mib = int(parts[0]), float(parts[1])
                    self.peaks[pid] = max(self.peaks.get(pid, 0.0), mib)

    def close(self) -> list[dict]:
        """[{pid, role, max_used_gib}]: this process is the pipeline, its descendants the trainer's
        processes; 'other' is anything else on the GPU (or pids nvidia-smi reports from another pid
        namespace, in a container)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        me = os.getpid()

        def role(pid: int) -> str:
            return "pipeline" if pid == me else "trainer" if pid in self.children else "other"

        return [
            {"pid": pid, "role": role(pid), "max_used_gib": round(mib / 1024, 3)}
            for pid, mib in sorted(self.peaks.items())
        ]


def planned_peaks(cfg) -> dict[str, float] | None:
    """What `ts plan` expects each process of this case to hold at its peak, in GiB (None if it fails)."""
    try:
        from thinking_seeds.train.memory_check import model_shape, visible_gpus
        from thinking_seeds.train.memory_plan import plan_processes
        from thinking_seeds.train.prompt_lengths import longest_prompt_tokens

        shape = model_shape(cfg.model.path, cfg.model.lora)
        procs = plan_processes(shape, cfg, visible_gpus(), prompt_tokens=longest_prompt_tokens(cfg) or 64)
        return {f"{p.role} on {p.device}": round(p.peak / 2**30, 3) for p in procs}
    except Exception as e:  # noqa: BLE001 - the plan is a comparison, not the check
        print(f"  (no plan: {type(e).__name__}: {e})", flush=True)
        return None


class GenMeter:
    """Counts sampled tokens and the time spent in HFEngine.generate (which ends in a host copy)."""

    def __init__(self):
        self.tokens, self.seconds = 0, 0.0
        self._orig = HFEngine.generate
        meter = self

        def generate(engine, contexts, params, max_new=None):
            t0 = time.perf_counter()
            out = meter._orig(engine, contexts, params, max_new)
            meter.seconds += time.perf_counter() - t0
            meter.tokens += sum(len(g.token_ids) for g in out)
            return out

        HFEngine.generate = generate

    def close(self):
        HFEngine.generate = self._orig


def run_case(
    name: str,
    model_path: str,
    algorithm: str,
    device: str,
    iterations: int,
    runs: Path,
    params: int | None,
    launcher: str = "accelerate",
    extra: list[str] | tuple[str, ...] = (),
) -> dict:
    case = {
        "model": name,
        "params": params,
        "algorithm": algorithm,
        "device": device,
        "launcher": launcher,
        "precision": "fp32" if "update.mixed_precision=no" in extra else "bf16",
        "mode": " ".join(e for e in extra if e.startswith("update.")) or "default",
        "iterations": iterations,
        "status": "error",
    }
    t0 = time.perf_counter()
    meter = GenMeter()
    sampler = GpuSampler() if device.startswith("cuda") else None
    try:
        cfg = load_config(
            "tiny",
            [
                f"model.path={model_path}",
                f"algorithm={algorithm}",
                f"device={device}",
                "update.mixed_precision=bf16",  # also the default on CUDA (auto); fp32 cases override it
                f"iterations={iterations}",
                f"update.launcher={launcher}",
                *RUN,
                *extra,
            ],
        )
        case["plan_gib"] = planned_peaks(cfg)
        if case["precision"] == "bf16":
            assert cfg.update.recompute_old_logprobs and cfg.engine_dtype == "bfloat16"
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        updates: list[dict] = []
        update_wall: list[float] = []
        swaps: list[float] = []

        def on_stage(k, stage, m):
            if stage == "continuation" and k > 0:  # θ_k into the engine: in memory, from the trainer's update
                swaps.append(m.seconds.get("weight_swap", 0.0))
            if stage == "update":
                updates.append(dict(m.metrics))
                update_wall.append(sum(m.seconds.values()))
            print(f"  {name}/{algorithm}/{device} iteration {k} {stage} {sum(m.seconds.values()):.2f}s", flush=True)

        train(RunDir.for_run(f"{name}-{algorithm}-{device.replace(':', '')}", runs), cfg, on_stage=on_stage)
        steps = sum(u.get("actor/optimizer_steps", 1.0) for u in updates)
        diffs = [u["actor/engine_logprob_diff/max"] for u in updates if "actor/engine_logprob_diff/max" in u]
        case.update(
            status="ok",
            gen_tokens=meter.tokens,
            gen_s=round(meter.seconds, 3),
            gen_tokens_per_s=round(meter.tokens / meter.seconds, 1) if meter.seconds else None,
            update_s_per_iteration=round(sum(update_wall) / len(update_wall), 4),
            update_s_per_step=round(sum(u["perf/fwd_bwd_s"] for u in updates) / steps, 4),
            # θ_k's hand-over into the engine (continuation/weight_swap): the trainer's own device tensors
            # with update.launcher=in_process, bytes over the persistent trainer's socket with accelerate
            handoff_s_per_iteration=round(sum(swaps) / len(swaps), 4) if swaps else None,
            engine_trainer_max_abs_logprob_diff=max(diffs) if diffs else None,
            engine_trainer_mean_abs_logprob_diff=(
                sum(u["actor/engine_logprob_diff/mean"] for u in updates) / len(updates) if diffs else None
            ),
            loss_finite=all(math.isfinite(u.get("actor/pg_loss", 0.0)) for u in updates),
            peak_gpu_mem_gib=(
                round(torch.cuda.max_memory_allocated() / 2**30, 3) if device.startswith("cuda") else None
            ),
            # the trainer process's own torch.cuda.max_memory_allocated (max over ranks and updates); in
            # process (update.launcher=in_process) it is this process's, as peak_gpu_mem_gib
            trainer_peak_gpu_mem_gib=max(
                (u["perf/cuda_max_memory_gib"] for u in updates if "perf/cuda_max_memory_gib" in u), default=None
            ),
        )
        if not case["loss_finite"]:
            case["status"] = "error"
            case["error"] = "non-finite loss"
    except Exception as e:  # noqa: BLE001 - one failed case must not hide the others' figures
        case["error"] = f"{type(e).__name__}: {e}"[:2000]
        traceback.print_exc()
    finally:
        meter.close()
        if sampler is not None:
            case["gpu_processes"] = sampler.close()  # nvidia-smi: every process's most used memory
    case["wall_s"] = round(time.perf_counter() - t0, 2)
    return case


def summary_line(case: dict) -> str:
    """One case's GPU memory beside the plan: what each process's allocator peaked at, what nvidia-smi saw
    it hold (context and cache included), and what `ts plan` expected, in GiB."""
    plan = case.get("plan_gib") or {}
    smi = {p["role"]: p["max_used_gib"] for p in case.get("gpu_processes") or []}
    planned = ", ".join(f"{k} {v}" for k, v in plan.items())
    return (
        f"  -> {case['model']}/{case['algorithm']}/{case['device']}/{case['launcher']} [{case['precision']}, "
        f"{case['mode']}] {case['status']}: pipeline peak {case.get('peak_gpu_mem_gib')} (smi {smi.get('pipeline')}), "
        f"trainer peak {case.get('trainer_peak_gpu_mem_gib')} (smi {smi.get('trainer')}); plan: {planned or None}; "
        f"{case.get('gen_tokens_per_s')} tokens/s, {case.get('update_s_per_step')} s/step"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "device_check_out"))
    ap.add_argument("--cpu-only", action="store_true", help="only the CPU half (what CI runs)")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="run only the cases whose model/algorithm/device/launcher/mode holds one",
    )
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    res: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "package_from": PACKAGE_FROM,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
        "gpu": {
            "skipped": a.cpu_only or not cuda,
            "reason": "--cpu-only" if a.cpu_only else (None if cuda else "torch sees no CUDA device"),
        },
        "cases": [],
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ts-device-check-") as tmp:
        runs = Path(tmp) / "runs"
        plan = [("tiny", "builtin:tiny", None, "cpu")]
        if not res["gpu"]["skipped"]:
            llama = Path(tmp) / "llama-100m"
            n = build_llama_100m(llama)
            plan = [("tiny", "builtin:tiny", None, "cuda"), ("llama-100m", str(llama), n, "cuda")] + plan
        cases = [(*p, algorithm, "accelerate", ()) for p in plan for algorithm in ("grpo", "thinking_seeds")]
        if not res["gpu"]["skipped"]:  # issue #25: the same-process hand-over on CUDA against the socket's
            cases.insert(4, ("llama-100m", str(llama), n, "cuda", "grpo", "in_process", ()))
            qwen = Path(tmp) / "qwen2-real-vocab"
            nq = build_qwen2_real_vocab(qwen)
            cases.insert(5, ("qwen2-v151936", str(qwen), nq, "cuda", "grpo", "accelerate", REAL_VOCAB_RUN))
        if not res["gpu"]["skipped"]:
            # The real vocabulary's second update mode (the first: the chunked head, the default), and the
            # ~100M model in fp32 beside its bf16 run (tokens/s and update time, bf16 against fp32).
            cases.insert(6, ("qwen2-v151936", str(qwen), nq, "cuda", "grpo", "accelerate", CHECKPOINTING_RUN))
            cases.insert(7, ("llama-100m", str(llama), n, "cuda", "grpo", "accelerate", ["update.mixed_precision=no"]))
        if a.only:
            cases = [c for c in cases if any(w in f"{c[0]}/{c[4]}/{c[3]}/{c[5]}/{' '.join(c[6])}" for w in a.only)]
        for name, path, n, device, algorithm, launcher, extra in cases:
            case = run_case(name, path, algorithm, device, a.iterations, runs, n, launcher, extra)
            print(summary_line(case), flush=True)
            res["cases"].append(case)
            (a.out / "device_check.json").write_text(json.dumps(res, indent=2))  # partial results survive a kill
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    (a.out / "device_check.json").write_text(json.dumps(res, indent=2))
    cols = (
        "model",
        "precision",
        "mode",
        "algorithm",
        "device",
        "launcher",
        "status",
        "gen_tokens_per_s",
        "update_s_per_step",
        "update_s_per_iteration",
        "handoff_s_per_iteration",
        "peak_gpu_mem_gib",
        "trainer_peak_gpu_mem_gib",
        "engine_trainer_max_abs_logprob_diff",
        "wall_s",
    )
    print("\t".join(cols))
    for c in res["cases"]:
        print("\t".join(str(c.get(k)) for k in cols))
    print(f"device check: {len(res['cases'])} cases in {res['wall_s']} s -> {a.out / 'device_check.json'}")
    return 0 if all(c["status"] == "ok" for c in res["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
