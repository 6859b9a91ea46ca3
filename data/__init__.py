"""Package data of thinking_seeds (installed as `thinking_seeds.assets`): the presets (presets/*.yaml)
and the bundled tiny models (models/). See README.md in this folder.

One setting moves the models: TS_MODELS_DIR (default: the models/ folder next to this file, i.e.
data/models in a checkout). Models built on the user's machine (`python -m thinking_seeds.train.smollm2`)
are written there, and built-in model names are looked up there first, then in the bundled folder.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRESETS_DIR = HERE / "presets"
BUNDLED_MODELS_DIR = HERE / "models"
# passed to every `accelerate launch` so that the user's default accelerate config is never read
ACCELERATE_NEUTRAL_CONFIG = HERE / "accelerate_neutral.yaml"


def models_dir() -> Path:
    """Where built models live: $TS_MODELS_DIR, else the bundled models folder."""
    env = os.environ.get("TS_MODELS_DIR")
    return Path(env).expanduser().resolve() if env else BUNDLED_MODELS_DIR


def model_path(name: str) -> Path:
    """A model folder by name: in models_dir() if it is there, else in the bundled folder."""
    built = models_dir() / name
    return built if built.exists() or not (BUNDLED_MODELS_DIR / name).exists() else BUNDLED_MODELS_DIR / name
