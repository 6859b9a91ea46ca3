"""The hard subset of a base model θ_0, fixed before any RL (docs/results/game24-base-protocol.md, bar 4).

A larger explorable space is only observable where θ_0's pass@k is below 1. The subset is defined by
θ_0 alone: the prompts of a split that θ_0 solves in fewer than `below` of `samples` samples (sampling
seed 0). Its pass@k is then measured on *fresh* samples (seed 1), so the subset's selection does not
decide its own pass@k (a prompt chosen for 0 successes among the selection samples would read
pass@k = 0 on those very samples).

    python -m thinking_seeds.studies.base_hard_subset MODEL --task game24 --split validation \\
        [--samples 64] [--below 0.25] [--prompts N] [--out hard_validation.json]

It prints and writes {rule, prompt_ids, selection: whole-split pass@1 / pass@k, fresh: the subset's
pass@1 / pass@k, bar: fresh pass@k < 1 with at least `min_size` prompts}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["hard_subset", "main"]


def hard_subset(
    model_dir: str | Path,
    *,
    task: str = "game24",
    split: str = "validation",
    train_size: int | None = None,
    samples: int = 64,
    below: float = 0.25,
    prompts: int | None = None,
    max_new_tokens: int = 80,
    min_size: int = 10,
) -> dict[str, Any]:
    """The subset and its fresh-sample pass@k (module docstring), as a JSON-ready dict."""
    from thinking_seeds.config import DataConfig
    from thinking_seeds.data.builtin_tasks import get_task
    from thinking_seeds.data.rewards import Verifier
    from thinking_seeds.data.sources import load_dataset
    from thinking_seeds.engine.models import load_model
    from thinking_seeds.engine.rollout import HFEngine
    from thinking_seeds.evals.evaluation import evaluate_prompts

    spec = get_task(task)
    with tempfile.TemporaryDirectory(prefix="ts-hard-") as work:
        sizes = {} if train_size is None else {"train_size": train_size}
        rows = load_dataset(spec.build_splits(Path(work), DataConfig(source=task, **sizes))[split], limit=prompts)
    model, tok = load_model(model_dir)
    model.eval()
    engine = HFEngine(model, tok, batch_size=256)
    with Verifier(backend=spec.reward, partial_credit=False) as verifier:

        def run(ps, seed):
            return evaluate_prompts(
                engine, tok, ps, verifier, n=samples, max_new_tokens=max_new_tokens, seed=seed, label=spec.label
            )

        sel = run(rows, 0)
        hard = [p for p, c in zip(rows, sel.correct_counts, strict=True) if c / samples < below]
        fresh = run(hard, 1) if hard else None
    pass_k = fresh.pass_at_k[samples] if fresh else None
    return {
        "model": str(model_dir),
        "task": task,
        "split": split,
        "rule": f"prompts solved in < {below:g} of {samples} samples (sampling seed 0); "
        "pass@k on fresh samples (seed 1)",
        "prompts": len(rows),
        "prompt_ids": [p.prompt_id for p in hard],
        "selection": {"pass@1": sel.pass_at_k[1], f"pass@{samples}": sel.pass_at_k[samples]},
        "fresh": None if fresh is None else {"pass@1": fresh.pass_at_k[1], f"pass@{samples}": pass_k},
        "bar": {"min_size": min_size, "holds": bool(pass_k is not None and pass_k < 1 and len(hard) >= min_size)},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--task", default="game24")
    ap.add_argument(
        "--split",
        default="validation",
        choices=["validation", "test", "train"],
        help="train: θ_0's success on the RL prompts (memorized ones read near 1: game24-base-v2-protocol.md)",
    )
    ap.add_argument("--train-size", type=int, default=None, help="data.train_size of the RL split (game24 preset: 489)")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--below", type=float, default=0.25, help="the subset: success rate below this on seed 0")
    ap.add_argument("--prompts", type=int, default=None, help="only the split's first N prompts (a quick look)")
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--out", type=Path, default=None, help="also write the result as JSON here")
    a = ap.parse_args(argv)
    if not (a.model / "config.json").is_file():
        print(
            f"hard_subset: {a.model} is not a model folder (no config.json); pass the base model's folder",
            file=sys.stderr,
        )
        raise SystemExit(2)
    res = hard_subset(
        a.model, task=a.task, split=a.split, train_size=a.train_size, samples=a.samples, below=a.below,
        prompts=a.prompts, max_new_tokens=a.max_new_tokens,
    )  # fmt: skip
    text = json.dumps(res, indent=2)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
