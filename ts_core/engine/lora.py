"""LoRA (`model.lora`): the trainer updates adapters only; checkpoints after θ_0 hold only them.

Layout in a run: `policy/step_000000/` is the full base model (θ_0); every later policy step and
every pool snapshot taken from it is a peft adapter directory (`adapter_model.safetensors`,
`adapter_config.json`, tokenizer, our manifest, the adapters' optimizer state), megabytes instead of
a model. A step is turned back into weights by peft itself: base + adapter, `merge_and_unload()`.
The base of an adapter step is always θ_0 of the same run (`policy/step_000000`, which retention
never prunes); the absolute path peft records in adapter_config.json is not trusted, so a run
directory can move.
"""

from __future__ import annotations

from pathlib import Path

import torch

from thinking_seeds.store.checkpoints import MODEL_LOAD_LOCK

__all__ = [
    "ADAPTER_CONFIG",
    "add_adapters",
    "base_of",
    "check_targets",
    "check_targets_of",
    "is_adapter",
    "load_policy",
    "merged_model",
    "merged_state_dict",
]

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter(ckpt_dir: str | Path) -> bool:
    return (Path(ckpt_dir) / ADAPTER_CONFIG).is_file()


def base_of(ckpt_dir: str | Path) -> Path:
    """θ_0 of the run an adapter step belongs to: a sibling `step_000000` of its policy folder,
    or, for a pool snapshot (`checkpoints/step_*`), the run's `policy/step_000000`."""
    ckpt_dir = Path(ckpt_dir).resolve()
    for cand in (ckpt_dir.parent / "step_000000", ckpt_dir.parent.parent / "policy" / "step_000000"):
        if (cand / "config.json").is_file():
            return cand
    raise FileNotFoundError(f"{ckpt_dir} is a LoRA adapter, but its run's base model (policy/step_000000) is missing")


def check_targets(model, lora, where: str = "this model") -> None:
    """ValueError in one line when a `model.lora.target_modules` name is no module of `model`."""
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in lora.target_modules if t not in present]
    if missing:
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ValueError(
            f"model.lora.target_modules: {missing} are not modules of {where}; its linear layers are {linear} "
            "(set model.lora.target_modules to some of them)"
        )


def check_targets_of(model_dir: Path, lora) -> None:
    """check_targets on the model at `model_dir` without reading its weights: its architecture is built
    from config.json on the meta device (no memory, well under a second), so a typo is refused before a run
    writes anything."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    check_targets(model, lora, where=str(model_dir))


def add_adapters(model, lora) -> torch.nn.Module:
    """Wrap a base model with fresh trainable adapters (`lora`: config.LoraSettings); the base is frozen."""
    from peft import LoraConfig, get_peft_model

    check_targets(model, lora)
    cfg = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, cfg)


def load_policy(policy_dir: Path, dtype, lora=None):
    """(model, tokenizer) of θ_k for training: the full model, or with `lora` the base with θ_k's
    adapters loaded trainable (θ_0: fresh adapters, zero update)."""
    from thinking_seeds.engine.models import load_model

    policy_dir = Path(policy_dir)
    if lora is None:
        return load_model(policy_dir, dtype)
    if not is_adapter(policy_dir):  # θ_0: the base itself
        model, tok = load_model(policy_dir, dtype)
        return add_adapters(model, lora), tok
    from peft import PeftModel

    model, tok = load_model(base_of(policy_dir), dtype)
    with MODEL_LOAD_LOCK:
        return PeftModel.from_pretrained(model, str(policy_dir), is_trainable=True), tok


def merged_model(ckpt_dir: Path):
    """An adapter step as a plain model, its base with the adapters merged in (peft's merge), and the
    base's tokenizer: what an engine swaps in and what `ts export` ships."""
    from peft import PeftModel

    from thinking_seeds.engine.models import load_model

    base, tok = load_model(base_of(ckpt_dir))
    with MODEL_LOAD_LOCK:
        return PeftModel.from_pretrained(base, str(ckpt_dir)).merge_and_unload(), tok


def merged_state_dict(ckpt_dir: Path, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The full weights of an adapter step (`merged_model`)."""
    merged, _ = merged_model(ckpt_dir)
    return {k: v.to(device) for k, v in merged.state_dict().items()}
