"""What a config names that lives outside the project: a user's reward function by import path, a
reasoning-gym data set by name, an experiment tracker's package.

These checks run while the config is validated (`thinking_seeds.config`), so a typo fails in one
line before any work. They sit beside the config at the bottom of the layers (ARCHITECTURE.md) and
import nothing of ours; the layers that use the plugins (data.rewards, data.verifier_worker,
data.rg_data, store.tracking) import them from here.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from collections.abc import Sequence
from typing import Any

__all__ = [
    "EXTRAS",
    "check_loggers",
    "check_task_names",
    "known_task_names",
    "load_function",
    "load_reward_fn",
]

# logger -> (module that must import, the pip extra that brings it)
EXTRAS = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}


def load_function(path: str, key: str) -> Any:
    """The user's function named `package.module:function` for config key `key` (reward.fn, prefix.loss).
    ValueError in one line when the path is malformed, the module does not import or the name is not
    a callable."""
    mod_name, sep, fn_name = path.partition(":")
    if not sep or not mod_name or not fn_name:
        raise ValueError(f"{key}={path!r} must look like package.module:function")
    try:
        module = importlib.import_module(mod_name)
    except Exception as e:  # an ImportError or the module's own failure: both are the user's to fix
        raise ValueError(
            f"{key}={path!r}: module {mod_name!r} does not import ({type(e).__name__}: {e}); "
            "check the name and that it is on PYTHONPATH"
        ) from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ValueError(f"{key}={path!r}: {mod_name} has no function {fn_name!r}")
    return fn


def load_reward_fn(path: str) -> Any:
    """The user's reward function named `package.module:function` (verl's custom reward function).

    Signature: fn(data_source: str, solution_str: str, ground_truth: str, extra_info: dict) ->
    float | {"score": float, ...} | None (None: no answer found).
    """
    return load_function(path, "reward.fn")


def known_task_names() -> list[str]:
    """Every reasoning-gym data set name (reasoning_gym.factory.DATASETS)."""
    from reasoning_gym.factory import DATASETS  # reasoning-gym is slow to import: only when asked

    return sorted(DATASETS)


def check_task_names(names: Sequence[str]) -> None:
    """ValueError naming an unknown reasoning-gym data set and the closest known names."""
    known = known_task_names()
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=4, cutoff=0.5)
            hint = (
                f"did you mean {', '.join(close)}?"
                if close
                else f"{len(known)} are known (reasoning_gym.factory.DATASETS)"
            )
            raise ValueError(f"data.tasks: unknown reasoning-gym data set {name!r}; {hint}")


def check_loggers(loggers: list[str]) -> None:
    """ValueError naming the first logger whose package is not installed, and its extra."""
    for name in loggers:
        if name in EXTRAS and importlib.util.find_spec(EXTRAS[name][0]) is None:
            raise ValueError(
                f"logger {name!r} needs the {EXTRAS[name][0]!r} package: "
                f"pip install 'thinking-seeds[{EXTRAS[name][1]}]' (or drop it from `logger`)"
            )
