"""What the memory plan (train/memory_plan.py) needs from the outside: the model's shape, from its
config.json on the meta device (exact parameter count, no weights read), and the visible devices'
capacities (GPU memory, host RAM); and the check `ts train` runs before a run starts.

On the CPU the check refuses only a plan beyond the host's RAM (the plan is an estimate; swap and
the OS decide the rest); on GPUs every GPU the run places a process on is checked. It costs one
meta-device model build (~10-30 ms for the presets' models, after the imports `ts train` makes anyway).
"""

from __future__ import annotations

from pathlib import Path

import torch

from thinking_seeds.config import ConfigError, RunConfig
from thinking_seeds.train.memory_fit import refusal
from thinking_seeds.train.memory_plan import PROMPT_TOKENS_DEFAULT, ModelShape

__all__ = ["capacities", "check_fits", "model_shape", "shape_of_config", "visible_gpus"]


def shape_of_config(config, lora=None) -> ModelShape:
    """ModelShape of a transformers config: the model built on the meta device, its parameters counted."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = {n: p.numel() for n, p in model.named_parameters()}  # tied weights are listed once
    text = getattr(config, "get_text_config", lambda: config)()
    hidden = text.hidden_size
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    embed = model.get_input_embeddings().weight
    tied = embed is model.get_output_embeddings().weight
    layers = [m for m in model.modules() if type(m).__name__ in set(model._no_split_modules or [])]
    largest_layer = max((sum(p.numel() for p in m.parameters()) for m in layers), default=0)
    lora_params = 0
    if lora is not None:  # r × (in + out) for every targeted Linear (peft's A and B)
        targets = set(lora.target_modules)
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
                lora_params += lora.r * (m.in_features + m.out_features)
    return ModelShape(
        params=sum(params.values()),
        layers=text.num_hidden_layers,
        hidden=hidden,
        intermediate=getattr(text, "intermediate_size", 4 * hidden),
        kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        vocab=text.vocab_size,
        embedding_only=0 if tied else embed.numel(),
        largest_param=max(params.values()),
        largest_layer=largest_layer,
        lora_params=lora_params,
        max_positions=getattr(text, "max_position_embeddings", None),
    )


def model_shape(path: str | Path, lora=None) -> ModelShape:
    """ModelShape of the model at `path` (a local directory or builtin:NAME): its config.json only."""
    import json

    from transformers import AutoConfig

    from thinking_seeds.engine.models import resolve_model_path

    where = resolve_model_path(str(path))  # builtin:NAME, or a directory with a config.json (one line if not)
    raw = json.loads((where / "config.json").read_text())
    # for_model builds the config class directly: from_pretrained formats the whole config for its log
    # line, a third of this check's time on the tiny model
    config = AutoConfig.for_model(**raw) if "model_type" in raw else AutoConfig.from_pretrained(where)
    return shape_of_config(config, lora)


def visible_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def capacities(gpus: int | None = None, gpu_bytes: float | None = None) -> dict[str, float]:
    """Device -> bytes: 'cpu' (the host's RAM) and each visible GPU, or `gpus` GPUs of `gpu_bytes` each
    (planning for a machine other than this one)."""
    import psutil

    caps: dict[str, float] = {"cpu": float(psutil.virtual_memory().total)}
    if gpus is not None:
        caps.update({f"cuda:{i}": float(gpu_bytes or 0) for i in range(gpus)})
        return caps
    for i in range(visible_gpus()):
        caps[f"cuda:{i}"] = float(torch.cuda.get_device_properties(i).total_memory)
    return caps


def check_fits(cfg: RunConfig, data_dir: Path | None = None) -> None:
    """Raise ConfigError (one line naming the key to change) when the run's plan cannot fit the visible
    devices: a GPU's memory, or the host's RAM. Runs on Ray rollout workers plan only this machine's
    trainer; a run whose model directory is not there yet is left to the model checks.

    Prompts as long as the model's positions allow (less rollout.max_new_tokens) are planned first: when that
    fits, no prompt can overflow and the data is not read; else the plan is at the data's longest prompt
    (train/prompt_lengths.py: the run's splits in `data_dir`, or those prepare will write)."""
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        gpus = 0
    else:
        gpus = visible_gpus()
        if not gpus:
            return  # device=cuda without a GPU: resolve_device says so in its own words
    try:
        shape = model_shape(cfg.model.path, cfg.model.lora)
    except (OSError, ValueError):
        return  # a run resumed without its base model directory: the model checks speak for it
    caps = capacities()
    longest_possible = (shape.max_positions or 0) - cfg.rollout.max_new_tokens
    if longest_possible > 0 and refusal(shape, cfg, caps, gpus, longest_possible) is None:
        return
    from thinking_seeds.train.prompt_lengths import longest_prompt_tokens

    line = refusal(shape, cfg, caps, gpus, longest_prompt_tokens(cfg, data_dir) or PROMPT_TOKENS_DEFAULT)
    if line:
        raise ConfigError(line)
