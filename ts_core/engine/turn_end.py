"""Where the model's turn ends, and how a prompt is written for a model without a chat template.

Both engines (engine/rollout.py's HFEngine, engine/vllm_engine.py) stop a response at any of `eos_ids`:
generation_config.json's `eos_token_id` (an int or a list), else config.json's, and the tokenizer's own
EOS. A list is how instruct models end their turn with another id than the base model's end of text:
Llama-3-Instruct's `<|eot_id|>` (128009) beside `<|end_of_text|>` (128001), Qwen's `<|im_end|>`
beside `<|endoftext|>`; stopping on the tokenizer's EOS alone runs them to `rollout.max_new_tokens`.

A base model's tokenizer has no chat template: its prompts are written plainly (`plain_prompt`), the
system text, then each turn as `User: ...` / `Assistant: ...`, ending in `Assistant:` for the answer,
tokenized with the tokenizer's own special tokens (a BOS where the model expects one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

log = logging.getLogger(__name__)
_ROLES = {"user": "User", "assistant": "Assistant"}
_told_plain: set[str] = set()  # tokenizers already logged as using the plain format


def _ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def eos_ids(generation_config: Mapping, config: Mapping, tokenizer_eos: int | None = None) -> tuple[int, ...]:
    """The ids that end the model's turn (module docstring): generation_config's eos_token_id, else
    config's, with the tokenizer's EOS; sorted, each once."""
    declared = generation_config.get("eos_token_id")
    if declared is None:
        declared = config.get("eos_token_id")
    return tuple(sorted({*_ids(declared), *_ids(tokenizer_eos)}))


def model_eos_ids(model, tokenizer) -> tuple[int, ...]:
    """`eos_ids` of a loaded transformers model (its generation_config, read from generation_config.json
    by from_pretrained) and its tokenizer."""
    gen = getattr(model, "generation_config", None)
    return eos_ids(
        {"eos_token_id": getattr(gen, "eos_token_id", None)},
        {"eos_token_id": getattr(model.config, "eos_token_id", None)},
        tokenizer.eos_token_id,
    )


def plain_prompt(messages: Iterable[Mapping[str, str]]) -> str:
    """The prompt text of a model without a chat template (module docstring)."""
    parts = []
    for m in messages:
        role = _ROLES.get(m["role"])
        parts.append(f"{role}: {m['content']}" if role else m["content"])  # system: its text alone
    return "\n\n".join([*parts, "Assistant:"])


def encode_plain(tokenizer, messages: Iterable[Mapping[str, str]]) -> list[int]:
    """Token ids of `plain_prompt`; logs once per tokenizer that the plain format is in use."""
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    if name not in _told_plain:
        _told_plain.add(name)
        log.warning(
            "%s: the tokenizer has no chat template (a base model): prompts are written plainly, "
            "'User: <question>' then 'Assistant:'; give it a chat template to render them its own way",
            name,
        )
    return list(tokenizer(plain_prompt(messages), add_special_tokens=True)["input_ids"])
