"""What a warm-up keeps: the chosen candidate, its report (warmup_report.json), and how to rebuild it.

    best = choose(candidates, target=(0.15, 0.30), n=16)   # in the pass@1 band, most pass@16 headroom
    tmp = stage_model(best["dir"], tok, out_dir)            # out_dir.tmp: the candidate and its tokenizer
    publish(tmp, out_dir, warmup_report(...))               # the report written, then swapped in

Apart from warmup.py (the training loop and its CLI) because this part reads no model: it picks among
evaluations already made and writes files. The SFT control reads the report back (`final_lr`, `lr`,
`batch_size`: experiments/sft_control.py), and a continued warm-up (`--init`) nests its init's report
and extends its `rebuild` chain.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

__all__ = ["REBUILD", "choose", "publish", "rebuild_chain", "stage_model", "warmup_report"]

# How each bundled model was built (the defaults of `main` are the chain_sum demo model's).
REBUILD = {
    "chain_sum": "python -m thinking_seeds.train.warmup",
    # Phase 1 (cosine) ended still improving, so phase 2 continues at its final lr until a plateau.
    "countdown": "python -m thinking_seeds.train.warmup --task countdown --out data/models/tiny-countdown --steps 6000 "
    "--schedule cosine --select last --eval-every 400 --eval-from 800 --eval-prompts 128 --max-new-tokens 80 "
    "--threads 1 && python -m thinking_seeds.train.warmup --task countdown --init data/models/tiny-countdown --out "
    "data/models/tiny-countdown --steps 4000 --lr 2e-4 --warmup-steps 1 --select last --eval-every 400 "
    "--eval-from 400 --eval-prompts 128 --max-new-tokens 80 --until-plateau 0.02 --threads 1",
}


def rebuild_chain(task: str, init_report: dict | None, command: str | None) -> str:
    """The shell command that rebuilds this model from nothing.

    A fresh build is its own command (or the task's bundled REBUILD when none is given); a continued
    one (`--init`) appends its command to the init model's chain, so a model built in phases says
    every phase. The bundled constant alone would name only the first phases of a model built later.
    """
    if init_report is None:
        return command or REBUILD.get(task, "python -m thinking_seeds.train.warmup")
    if command is None:
        raise ValueError("a continued warm-up (init) needs its own command line to write a rebuild chain")
    return f"{init_report.get('rebuild', '<unknown: the init model has no warmup_report.json>')} && {command}"


def choose(candidates: list[dict], target: tuple[float, float] | None, n: int) -> dict:
    """The candidate to keep: with `target` (a pass@1 band) the one in the band with the largest pass@n /
    pass@1 headroom (none in the band: the one nearest its middle); without, the last one."""
    if target is None:
        return candidates[-1]
    lo, hi = target
    in_band = [c for c in candidates if lo <= c["pass@1"] <= hi]
    pool = in_band or sorted(candidates, key=lambda c: abs(c["pass@1"] - (lo + hi) / 2))[:1]
    return max(pool, key=lambda c: c[f"pass@{n}"] / max(c["pass@1"], 1e-9))


def stage_model(best_dir: str | Path, tok, out_dir: Path) -> Path:
    """The chosen candidate and the tokenizer copied into `out_dir`.tmp (replacing an older one)."""
    tmp_out = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp_out, ignore_errors=True)
    shutil.copytree(best_dir, tmp_out)
    tok.save_pretrained(tmp_out)
    return tmp_out


def publish(tmp_out: Path, out_dir: Path, report: dict[str, Any]) -> None:
    """Write the report beside the staged model, then swap it in for `out_dir`."""
    (tmp_out / "warmup_report.json").write_text(json.dumps(report, indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp_out.rename(out_dir)


def warmup_report(
    settings: dict[str, Any],
    *,
    best: dict,
    target: tuple[float, float] | None,
    candidates: list[dict],
    params: int,
    final_lr: float,
    build_seconds: float,
    init: Path | None,
    init_report: dict | None,
    eval_prompts: int,
    command: str | None,
) -> dict[str, Any]:
    """warmup_report.json: the choice, every candidate's evaluation, the settings (`settings`: the build's, as
    build_tiny_model keeps them for its resume check) and the rebuild chain."""
    s = settings
    last3 = [c["pass@1"] for c in candidates[-3:]]
    return {
        "task": s["task"],
        "chosen_step": best["step"],
        "target_pass@1": list(target) if target else None,
        "in_target_band": bool(target) and target[0] <= best["pass@1"] <= target[1],
        "plateau": {"last_three_pass@1": last3, "spread": max(last3) - min(last3) if last3 else None},
        "candidates": [{k: v for k, v in c.items() if k != "dir"} for c in candidates],
        "params": params,
        "steps": s["steps"],
        "batch_size": s["batch_size"],
        "lr": s["lr"],
        "schedule": s["schedule"],
        # The lr the warm-up ended at: the SFT control continues from there ("more of the same training").
        "final_lr": final_lr,
        "corpus_size": s["corpus_size"],
        "seed": s["seed"],
        "warmup_steps": s["warmup_steps"],
        "build_seconds": build_seconds,
        "steps_done": candidates[-1]["step"] if candidates else 0,
        "until_plateau": s["until_plateau"],
        "init": {"path": str(init), "report": init_report} if init is not None else None,
        "eval": {
            "prompts": eval_prompts,
            "samples": s["eval_samples"],
            "split": "validation",
            "max_new_tokens": s["max_new_tokens"],
        },
        "torch_threads": torch.get_num_threads(),
        "rebuild": rebuild_chain(s["task"], init_report, command),
    }
