"""`ts export RUN --step N --out DIR`: a policy step as a clean Hugging Face model directory.

What a run keeps per step is a training checkpoint (weights, optimizer state, our manifest of
hashes). What a user ships is the model: weights, config, generation config, tokenizer and chat
template, plus a short model card (README.md) with the run's config and its latest evaluation of
that step. `transformers` (`AutoModelForCausalLM.from_pretrained(DIR)`) and vLLM (`LLM(DIR)`) load
the directory as is. The weights are hash-checked before they are copied.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import yaml

from thinking_seeds.engine.lora import is_adapter, merged_model
from thinking_seeds.store.checkpoints import MANIFEST_NAME, OPTIMIZER_NAME, check_model_dir, verified
from thinking_seeds.store.contained import open_regular
from thinking_seeds.store.parquet_io import shareable
from thinking_seeds.store.run_dir import RunDir

__all__ = ["ExportError", "export_policy"]

_SKIP = {MANIFEST_NAME, OPTIMIZER_NAME}


class ExportError(ValueError):
    """A step that cannot be exported, with what to do about it."""


def _copy_listed(src: Path, dst: Path) -> None:
    """Copy one listed file, opened without following a link and refused unless a regular file
    (store/contained.py); its hash was checked by `verified` just before."""
    fd = open_regular(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(fd, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)


def _eval_metrics(run: RunDir, step: int) -> dict[str, float]:
    """The evaluation metrics recorded for θ_step (in-training, nightly or final test), if any."""
    import pyarrow.parquet as pq

    out: dict[str, float] = {}
    for f in sorted((run.root / "metrics" / f"iteration={step}").glob("*.parquet")):
        stage = f.stem
        if not (stage.startswith("evaluate") or stage == "final-test"):
            continue
        for r in pq.read_table(f, columns=["name", "value"]).to_pylist():
            if r["name"].startswith(("eval/", "eval_seeded/")):
                out[f"{stage}: {r['name']}"] = r["value"]
    return out


def _card(run: RunDir, step: int, cfg: dict, metrics: dict[str, float]) -> str:
    lines = [
        f"# {run.run_id} — policy step {step}",
        "",
        f"Trained with thinking-seeds: `{cfg.get('algorithm')}` on `{cfg.get('data', {}).get('source')}` from "
        f"`{cfg.get('model', {}).get('path')}`, {step} of {cfg.get('iterations')} iterations (seed {cfg.get('seed')}).",
        "",
        "## Evaluation of this step",
        "",
    ]
    if metrics:
        lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {v:.4f} |" for k, v in sorted(metrics.items())]
    else:
        lines.append("_not evaluated at this step_ (run `ts eval RUN --step N`)")
    lines += ["", "## Run configuration", "", "```yaml", yaml.safe_dump(cfg, sort_keys=False).rstrip(), "```", ""]
    return "\n".join(lines)


def _saved_settings(run: RunDir) -> dict:
    """config.yaml as plain data for the model card, only when it is the file the run's prepare stage
    hashed (RunDir.config_problem): an edited or linked one is refused in one line, not shipped."""
    from thinking_seeds.yaml_limits import read_bounded

    run.check_config()  # DataError (one line) naming what is wrong and how to get it back
    try:
        cfg = read_bounded(run.config_path)
    except (OSError, ValueError, yaml.YAMLError) as e:  # ValueError: over the limits (a YAML bomb)
        raise ExportError(f"{run.config_path} does not read as a config ({e}); `ts check {run.run_id}`") from None
    return cfg if isinstance(cfg, dict) else {}


def export_policy(run: RunDir, step: int | None, out_dir: Path) -> Path:
    """Write θ_step of `run` to `out_dir` (created; must not exist or be empty). Returns out_dir."""
    from thinking_seeds.store.checkpoints import list_checkpoints
    from thinking_seeds.store.retention import is_pruned

    steps = [c.step for c in list_checkpoints(run.policy_root)]
    if not steps:
        raise ExportError(f"run {run.run_id} has no policy checkpoint under {run.policy_root}; train it first")
    step = steps[-1] if step is None else step
    src = run.policy(step)
    if not src.is_dir():
        why = (
            "was pruned by checkpoint.keep_last"
            if is_pruned(src)
            else "has no checkpoint (θ is written every checkpoint.every iterations, at pool snapshots and at the end)"
        )
        raise ExportError(f"policy step {step} of run {run.run_id} {why}; steps with a checkpoint: {steps}")
    run.inside(src)  # a step folder that is a link out of the run is not exported
    info = verified(src)  # every file it lists hashes as listed, none leads out of the step folder
    if not is_adapter(src):
        check_model_dir(src)  # safetensors of the shapes its config builds
    cfg = _saved_settings(run)  # refused before anything is written
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty; choose a new --out folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _fill(tmp, run, step, src, sorted(info.sha256), cfg)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:  # a full disk, Ctrl-C: no hidden half-copy of a model left beside --out
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _fill(tmp: Path, run: RunDir, step: int, src: Path, listed: list[str], cfg: dict) -> None:
    """The exported folder's files: the weights (a LoRA step merged), the tokenizer, the model card.

    Only the files the step's manifest lists (`listed`, hash-checked by `verified`) are copied, each
    opened without following a link: a `notes.txt` linked to a secret beside them is not shipped."""
    shareable(tmp)  # mkdtemp makes 0700: the exported folder follows the umask
    if is_adapter(src):  # a LoRA step: ship base + adapters merged, so any loader takes it as is
        merged, tok = merged_model(src)
        merged.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    else:
        for name in listed:
            if name not in _SKIP:
                _copy_listed(src / name, tmp / name)
    (tmp / "README.md").write_text(_card(run, step, cfg, _eval_metrics(run, step)))
    (tmp / "thinking_seeds.json").write_text(json.dumps({"run_id": run.run_id, "step": step}, indent=2))
