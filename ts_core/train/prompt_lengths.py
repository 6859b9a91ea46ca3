"""The longest prompt a run will meet, in tokens, for the memory plan (train/memory_plan.py): `ts train`'s check
and `ts plan` size the micro-batches and the KV cache with the data's own prompts instead of an assumed 256.

Measured as the stages encode prompts (the chat template applied: engine/models.encode_prompt) over every split:
from the run's data folder when it has one, else from what prepare will write -- a generated source built here
into a temporary folder (the same seeded generator: the same rows), data.source=parquet read from the user's
files. A few thousand short prompts take well under a second with a fast tokenizer.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from thinking_seeds.config import RunConfig

__all__ = ["longest_prompt_tokens"]


def _prompts(cfg: RunConfig, data_dir: Path | None, tmp: Path) -> list:
    from thinking_seeds.data.builtin_tasks import build_splits
    from thinking_seeds.data.sources import load_dataset

    if data_dir is not None and (data_dir / "train.parquet").is_file():
        paths = sorted(data_dir.glob("*.parquet"))
    elif cfg.data.source == "parquet":
        paths = [Path(p) for p in (cfg.data.train_path, cfg.data.val_path) if p]
    else:
        paths = list(build_splits(tmp, cfg.data).values())
    return [p for path in paths for p in load_dataset(path)]


def longest_prompt_tokens(cfg: RunConfig, data_dir: Path | None = None) -> int | None:
    """Tokens of the longest prompt of the run's splits (the run's `data_dir` if it holds them, else the splits
    prepare would write); None when the data or the model's tokenizer cannot be read here (prepare and the
    model checks say why, in their own words)."""
    from transformers import AutoTokenizer

    from thinking_seeds.engine.models import encode_prompt, resolve_model_path

    try:
        tok = AutoTokenizer.from_pretrained(resolve_model_path(cfg.model.path), local_files_only=True)
        with tempfile.TemporaryDirectory(prefix="ts-plan-data-") as tmp:
            prompts = _prompts(cfg, data_dir, Path(tmp))
        return max((len(encode_prompt(tok, p.chat())) for p in prompts), default=None)
    except (OSError, ValueError, KeyError, ImportError):
        return None
