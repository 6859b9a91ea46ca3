"""The SFT control's training: supervised steps for a wall-time budget, cut where the RL runs evaluate.

    state = train_for_budget(run, cfg, seed=0, budget_seconds=120.0)   # control.json's record

The budget is cut into `iterations` equal slices; after slice k the model is saved as policy step k
(where the RL runs evaluate: `eval_steps`) and, on the RL runs' snapshot schedule, into the historical
pool, and the slice's `sft/*` metrics and `time/sft/train` are written as stage `sft` of iteration k-1.
The step is the warm-up's (train/sft.py) at the warm-up's lr and batch (`control_hyper`), on fresh
worked solutions of the run's task (`control_corpus`, held-out prompts excluded).

Apart from sft_control.py (the control's config, run id, process and jobs, which must agree on its
command line) because this part is the training alone: given a prepared run directory, it trains and
saves, and knows nothing of the comparison around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError, RunConfig
from thinking_seeds.experiments.members import read_json
from thinking_seeds.experiments.run_spec import CONTROL_METHOD
from thinking_seeds.store.run_dir import RunDir

__all__ = ["control_corpus", "control_hyper", "eval_steps", "read_json", "train_for_budget"]

DEFAULT_LR = 2e-3  # the warm-up's (thinking_seeds.train.warmup), used when the base model has no warmup_report.json
DEFAULT_BATCH = 64


def eval_steps(cfg: RunConfig) -> list[int]:
    """Policy steps the RL runs evaluate: θ_0 and θ_{k+1} for every k with eval_due(cfg, k)."""
    from thinking_seeds.pipeline.graph import eval_due

    return [0] + [k + 1 for k in range(cfg.iterations) if eval_due(cfg, k)]


def control_corpus(run: RunDir, cfg: RunConfig, size: int, seed: int) -> list[tuple[str, str]]:
    """(question, worked solution) pairs of the run's task, none of them a held-out prompt."""
    from thinking_seeds.data.builtin_tasks import BUILTIN_TASKS
    from thinking_seeds.data.sources import load_dataset

    task = BUILTIN_TASKS.get(cfg.data.source)
    if task is not None:
        held_out = task.held_out_keys(run.data_dir / "validation.parquet") | task.held_out_keys(
            run.data_dir / "test.parquet"
        )
        # A stream the warm-up never drew from (it used seed 0): new examples of the same kind.
        return task.warmup_corpus(size, 10_000 + seed, held_out, cfg.data)
    pairs = [(p.user_text, p.target) for p in load_dataset(run.data_dir / "train.parquet") if p.target]
    if not pairs:
        raise ConfigError(
            f"the SFT control needs worked solutions: {run.data_dir / 'train.parquet'} has no `target` column values"
        )
    return pairs


def control_hyper(base: Path, lr: float | None, batch_size: int | None) -> tuple[float, int]:
    """The control's lr and batch: the warm-up's. A warm-up with a decaying schedule (the countdown
    base model) is continued at the lr it ended at — more of the same training, not a restart."""
    rep = read_json(base / "warmup_report.json") or {}
    lr_end = rep.get("final_lr", rep.get("lr", DEFAULT_LR))
    default_lr = lr_end if rep.get("schedule") == "cosine" else rep.get("lr", DEFAULT_LR)
    return (
        float(lr if lr is not None else default_lr),
        int(batch_size if batch_size is not None else rep.get("batch_size", DEFAULT_BATCH)),
    )


def train_for_budget(
    run: RunDir,
    cfg: RunConfig,
    *,
    seed: int,
    budget_seconds: float,
    lr: float | None = None,
    batch_size: int | None = None,
    warmup_steps: int = 25,
    corpus_size: int = 50_000,
    max_steps: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train the control from θ_0 of `run` (prepared) for `budget_seconds` of steps (or `max_steps`), saving
    each slice's policy step, pool snapshot and metrics; returns its record (control.json, `done` set)."""
    import torch

    from thinking_seeds.engine.models import load_model, resolve_model_path
    from thinking_seeds.store.checkpoints import save_checkpoint
    from thinking_seeds.train.sft import encode_corpus, sft_optimizer, sft_step

    iters = cfg.iterations
    steps_eval = eval_steps(cfg)
    snap_steps = [k for k in range(iters) if k % cfg.pool.snapshot_every == 0]
    lr_, bs = control_hyper(resolve_model_path(cfg.model.path), lr, batch_size)
    torch.manual_seed(seed)
    model, tok = load_model(run.policy(0), cfg.model.dtype)
    t_corpus = time.perf_counter()
    pairs = control_corpus(run, cfg, corpus_size, seed)
    ids, labels, _ = encode_corpus(tok, pairs)
    answer_tokens = float((labels != -100).sum(-1).float().mean())
    log(
        f"{run.run_id}: corpus of {len(pairs)} solutions in {time.perf_counter() - t_corpus:.1f}s; "
        f"budget {budget_seconds:.1f}s, lr {lr_}, batch {bs}"
    )
    opt, sched = sft_optimizer(model, lr_, warmup_steps)
    gen = torch.Generator().manual_seed(seed)
    if 0 in snap_steps:
        save_checkpoint(model, tok, run.pool_root, 0, extra={"iteration": 0, "control": CONTROL_METHOD}, overwrite=True)
    elapsed, steps, seg_steps, seg_loss, seg_secs = 0.0, 0, 0, 0.0, 0.0
    milestones: dict[int, dict[str, float]] = {}
    k = 1  # the next policy step to save, after budget * k / iterations seconds
    while k <= iters:
        if elapsed >= budget_seconds * k / iters or (max_steps is not None and steps >= max_steps):
            model.eval()
            if k in steps_eval:
                save_checkpoint(
                    model,
                    tok,
                    run.policy_root,
                    k,
                    extra={"control": CONTROL_METHOD, "sft_steps": steps},
                    overwrite=True,
                )
            if k in snap_steps:
                save_checkpoint(
                    model,
                    tok,
                    run.pool_root,
                    k,
                    extra={"iteration": k, "control": CONTROL_METHOD},
                    overwrite=True,
                )
            metrics = {
                "sft/steps": float(steps),
                "sft/samples": float(steps * bs),
                "sft/tokens": steps * bs * answer_tokens,
                "sft/lr": lr_,
                "time/sft/train": seg_secs,
            }
            if seg_steps:
                metrics["sft/loss"] = seg_loss / seg_steps
            run.write_metrics(k - 1, "sft", metrics)
            milestones[k] = {"steps": steps, "seconds": elapsed}
            log(
                f"iteration {k - 1}/{iters - 1} sft {seg_secs:.2f}s | steps {steps}"
                + (f", loss {seg_loss / seg_steps:.4f}" if seg_steps else "")
            )
            seg_steps, seg_loss, seg_secs = 0, 0.0, 0.0
            k += 1
            continue
        t = time.perf_counter()
        loss = sft_step(model, opt, sched, ids, labels, bs, gen, tok.pad_token_id)
        dt = time.perf_counter() - t
        elapsed += dt
        seg_secs += dt
        seg_loss += loss
        seg_steps += 1
        steps += 1
    return {
        "done": True,
        "budget_seconds": budget_seconds,
        "trained_seconds": elapsed,
        "steps": steps,
        "samples": steps * bs,
        "tokens": steps * bs * answer_tokens,
        "lr": lr_,
        "batch_size": bs,
        "warmup_steps": warmup_steps,
        "corpus_size": len(pairs),
        "max_steps": max_steps,
        "milestones": {str(k): v for k, v in milestones.items()},
    }
