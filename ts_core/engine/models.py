"""Models: load any local Hugging Face causal LM, and build the tiny offline base model.

Nothing here touches a model hub: `local_files_only=True` everywhere. The tiny model is a standard
`LlamaForCausalLM` (so vLLM can load the same checkpoint) with a character-level tokenizer built
with the `tokenizers` library: on the arithmetic task every character is a decision, and a 60-token
vocabulary keeps the model at ~0.8M parameters.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from thinking_seeds.assets import model_path
from thinking_seeds.engine.turn_end import encode_plain
from thinking_seeds.store.checkpoints import MODEL_LOAD_LOCK, check_model_dir

# Per-file "Loading weights" bars on every checkpoint swap drown our own progress display.
hf_logging.disable_progress_bar()

# `model.path: builtin:<name>` -> folder name under the package's models (thinking_seeds.assets;
# TS_MODELS_DIR moves the ones built on this machine).
BUILTIN_MODELS = {
    "tiny": "tiny-chainsum",
    # The multi-solution testbed's base model, trained to its supervised plateau (issue #9).
    "tiny-countdown": "tiny-countdown",
    # The same base warmed up further and cosine-decayed (v2 + decay): the last three validation
    # evaluations within 1.5 points (issue #9's plateau bar); docs/results/countdown-base-v3-check.md.
    "tiny-countdown-v3": "tiny-countdown-v3",
    # The 24 game's base (issue #26; `make game24-model`, docs/results/game24-base-protocol.md).
    "tiny-game24": "tiny-game24",
    # v2: the warm-up leaves out the 489 multisets RL trains on (v1 memorized them; game24-base-v2-protocol.md).
    "tiny-game24-v2": "tiny-game24-v2",
    "smollm2": "smollm2-135m",  # built here: python -m thinking_seeds.train.smollm2
    "smollm2-chainsum": "smollm2-135m-chainsum",  # ... --warmup
}


def builtin_model_path(name: str) -> Path:
    """The folder of a built-in model (bundled, or built into TS_MODELS_DIR)."""
    if name not in BUILTIN_MODELS:
        raise ModelError(f"unknown builtin model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    return model_path(BUILTIN_MODELS[name])


PAD, EOS = "<pad>", "<eos>"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
# Chat template of the tiny model: the user's text, a newline, then the answer. No role markers:
# the model only ever sees one turn, and every character costs compute on a CPU.
TINY_CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


class ModelError(ValueError):
    """A model path or file that cannot be used, with what to do about it."""


def resolve_model_path(path: str) -> Path:
    """`builtin:<name>` -> the bundled checkpoint; anything else is a local directory."""
    if path.startswith("builtin:"):
        name = path.split(":", 1)[1]
        p = builtin_model_path(name)
        if not (p / "config.json").exists():
            hint = {
                "tiny": "python -m thinking_seeds.train.warmup",
                "tiny-countdown": "python -m thinking_seeds.train.warmup --task countdown (see its warmup_report.json)",
                "tiny-countdown-v3": "the chain in data/models/tiny-countdown-v3/warmup_report.json (rebuild)",
                "tiny-game24": "make game24-model (docs/results/game24-base-protocol.md)",
                "smollm2": "python -m thinking_seeds.train.smollm2",
                "smollm2-chainsum": "python -m thinking_seeds.train.smollm2 --warmup",
            }.get(name, "python -m thinking_seeds.train.smollm2")
            raise ModelError(f"builtin model {name!r} is not built at {p}; build it with `{hint}`")
        return p
    p = Path(path).expanduser()
    if not (p / "config.json").exists():
        raise ModelError(f"no Hugging Face checkpoint at {p} (config.json missing); pass a local model directory")
    return p


def char_tokenizer(charset: str) -> PreTrainedTokenizerFast:
    """A character-level HF tokenizer over `charset` (+ <pad>, <eos>), built offline."""
    vocab = {PAD: 0, EOS: 1}
    for ch in sorted(set(charset)):
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    # Every character is its own piece; Fuse joins them back without spaces on decode.
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)
    fast.chat_template = TINY_CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_llama(
    vocab_size: int,
    pad_id: int,
    eos_id: int,
    *,
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    intermediate: int = 384,
    max_positions: int = 256,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A small standard Llama (≈0.8M parameters at the defaults), randomly initialised."""
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=eos_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


class DeviceError(ValueError):
    """A `device` setting this machine cannot honour, with what to do about it."""


def release_cached_memory(device: torch.device) -> None:
    """Hand the CUDA caching allocator's free blocks back to the GPU: between generation and update the
    engine and the trainer (two processes, each with its own allocator) take turns on one device, and a
    block one keeps cached at its peak is memory the other cannot have. A no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """`auto` -> the first CUDA GPU when torch sees one, else the CPU; `cpu`, `cuda`, `cuda:N` as given.

    Called when a model is placed, never at import: nothing here touches CUDA before a model needs it.
    """
    if isinstance(spec, torch.device):
        return spec
    spec = (spec or "auto").strip()
    if spec == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            build = f"torch {torch.__version__} has no CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise DeviceError(f"device={spec}, but {build}; use device=cpu or device=auto")
        index = int(spec.split(":", 1)[1]) if ":" in spec else 0
        if index >= torch.cuda.device_count():
            raise DeviceError(f"device={spec}, but only {torch.cuda.device_count()} GPU(s) are visible (cuda:0..)")
        return torch.device("cuda", index)
    raise DeviceError(f"device must be auto, cpu, cuda or cuda:N, got {spec!r}")


def check_model_files(p: Path, key: str | None = None) -> None:
    """ModelError in one line when the directory has no safetensors weights or no tokenizer files
    (`key`, e.g. "model.path", is named in the message when given)."""
    where = f"{key}={p}:" if key else str(p)
    if not list(p.glob("*.safetensors")):
        raise ModelError(f"{where} has no .safetensors weights; convert it (pickled .bin/.pt weights are never loaded)")
    if not any((p / f).is_file() for f in TOKENIZER_FILES):
        raise ModelError(
            f"{where} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save the tokenizer beside the "
            "weights (tokenizer.save_pretrained(dir))"
        )


def load_model(path: str | Path, dtype: str | torch.dtype = torch.float32, device: str | torch.device | None = None):
    """Load a local HF causal LM and its tokenizer (safetensors only, no hub).

    The weights are read on the CPU and then moved to `device` (None: stay on the CPU; "auto": the
    GPU when there is one; see resolve_device).

    A checkpoint written by save_checkpoint is verified against its manifest first (once per
    process and on-disk state), so corrupt or truncated weights end in a one-line CheckpointError
    naming the file and how to rebuild it, never in a silently wrong model.
    """
    p = resolve_model_path(str(path))
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if (p / "manifest.json").is_file():  # one of our checkpoints: its hashes vouch for every file
        from thinking_seeds.store.checkpoints import verified

        verified(p)
    check_model_files(p)
    check_model_dir(p)  # safetensors of the shapes its config builds, before from_pretrained reads them
    with MODEL_LOAD_LOCK:
        tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
    with MODEL_LOAD_LOCK:
        model = AutoModelForCausalLM.from_pretrained(p, dtype=dtype, local_files_only=True, use_safetensors=True)
    if device is not None:
        model.to(resolve_device(device))
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return model, tok


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def encode_prompt(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a chat prompt, ready for the answer to follow: through the tokenizer's chat template,
    or, a base model's tokenizer without one, in the plain format of engine/turn_end.py."""
    if tokenizer.chat_template is None:
        return encode_plain(tokenizer, messages)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)
