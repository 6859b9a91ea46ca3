"""The vLLM tests' tiny model and short run (make test-vllm, .venv-vllm): a 2-layer random Llama on the
chain_sum characters (head_dim 32, a size vLLM's CPU attention accepts), and the overrides of a
Thinking Seeds run small enough for a few seconds an iteration."""

from __future__ import annotations

from pathlib import Path


def save_tiny(path: Path, seed: int = 3) -> Path:
    """A random tiny Llama and its character tokenizer, saved as a Hugging Face directory."""
    from thinking_seeds.data.chain_sum import CHARSET
    from thinking_seeds.engine.models import char_tokenizer, tiny_llama

    tok = char_tokenizer(CHARSET)
    model = tiny_llama(
        len(tok), tok.pad_token_id, tok.eos_token_id, hidden=64, layers=2, heads=2, intermediate=96, seed=seed
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def small_run(base: Path, *extra: str) -> list[str]:
    """Overrides of the tiny preset for a short thinking_seeds run on vLLM from `base`, then `extra`."""
    return [
        "algorithm=thinking_seeds",
        f"model.path={base}",
        "rollout.engine=vllm",
        "rollout.prompts_per_iteration=4",
        "rollout.group_size=4",
        "rollout.seeds_per_group=2",
        "rollout.max_new_tokens=24",
        "data.train_size=40",
        "data.val_size=8",
        "data.test_size=8",
        "eval.prompts=4",
        "eval.samples=2",
        "pool.snapshot_every=1",
        *extra,
    ]
