"""prepare (once per run): config.yaml, the data splits and θ_0, a verified copy of the base model."""

from __future__ import annotations

import shutil

from thinking_seeds.config import RunConfig, load_saved_config, save_config
from thinking_seeds.data.builtin_tasks import build_splits
from thinking_seeds.data.rewards import check_reward_fn
from thinking_seeds.data.sources import check_user_data, load_dataset
from thinking_seeds.engine.lora import check_targets_of
from thinking_seeds.engine.models import check_model_files, load_model, resolve_model_path
from thinking_seeds.pipeline.resume import continued_config
from thinking_seeds.pipeline.session import Timer
from thinking_seeds.store.atomic import atomic_path
from thinking_seeds.store.checkpoints import save_checkpoint, verify_checkpoint
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.run_dir import RunDir


def check_inputs(run: RunDir, cfg: RunConfig) -> None:
    """Refuse, in one line and before anything is written, what the user gave that this run cannot use:
    a bad data file (check_user_data) and, until θ_0 is copied, a model directory without weights or
    tokenizer or a `model.lora.target_modules` name that is not a module of the model (its architecture
    on the meta device: no weights read). The CLI, the flow and the loop call it before the run's lock
    makes the run directory."""
    check_user_data(cfg.data)
    if not (run.policy(0) / "manifest.json").exists():
        base = resolve_model_path(cfg.model.path)
        check_model_files(base, key="model.path")
        if cfg.model.lora is not None:
            check_targets_of(base, cfg.model.lora)


def prepare(run: RunDir, cfg: RunConfig) -> Manifest:
    """Write config.yaml, the data splits and θ_0 (a verified copy of the base model)."""
    check_inputs(run, cfg)
    run.root.mkdir(parents=True, exist_ok=True)
    if run.config_path.exists():
        old = load_saved_config(run.config_path)
        if old.config_hash() != cfg.config_hash():
            continued_config(run, cfg)  # another config: the line that names its keys
            raise ValueError(
                f"run {run.root} was started with another config (hash {old.config_hash()} != {cfg.config_hash()}); "
                "resume it with the same preset and --set values, or choose a new --run-id"
            )
        fresh = False
    else:
        with atomic_path(run.config_path) as tmp:
            save_config(cfg, tmp)
        fresh = not run.data_dir.exists()
    t = Timer()
    with t("data"):
        if cfg.data.source != "parquet":  # generated: a built-in task or a reasoning-gym mixture
            if not all((run.data_dir / f"{s}.parquet").exists() for s in ("train", "validation", "test")):
                build_splits(run.data_dir, cfg.data)
        else:
            run.data_dir.mkdir(parents=True, exist_ok=True)
            for split, src in (("train", cfg.data.train_path), ("validation", cfg.data.val_path)):
                shutil.copyfile(src, run.data_dir / f"{split}.parquet")  # checked above (check_inputs)
    if cfg.reward.fn:  # the user's function on a real row, before any model is loaded
        try:
            check_reward_fn(cfg.reward.fn, load_dataset(run.data_dir / "validation.parquet")[0])
        except ValueError:
            if fresh:  # a refused start leaves no config behind: the fixed one (another hash) may start here
                run.config_path.unlink()
                shutil.rmtree(run.data_dir)
            raise
    with t("model_load"):
        if not (run.policy(0) / "manifest.json").exists():
            model, tok = load_model(resolve_model_path(cfg.model.path), cfg.model.dtype)
            save_checkpoint(model, tok, run.policy_root, 0, extra={"source": cfg.model.path})
        verify_checkpoint(run.policy(0))
    m = Manifest("prepare", 0, cfg.config_hash(), seconds=t.seconds)
    m.record(run, "config", run.config_path)
    m.record(run, "policy", run.policy(0))
    for split in ("train", "validation"):
        m.record(run, split, run.data_dir / f"{split}.parquet")
    return m
