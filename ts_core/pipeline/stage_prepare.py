"""prepare (once per run): config.yaml, the data splits and θ_0, a verified copy of the base model.

Redone on a resume whose prepare outputs no longer hash as its manifest recorded, it never records
a file it did not write or check against that record (the old manifest): a generated split that
differs is rebuilt (the same bytes: the generator is seeded) and refused only if the rebuild differs
too; a user's own split (data.source: parquet) is copied again from its file, and refused in one line
when that file no longer holds what the run started from; θ_0 that differs is copied again from the
base model. With no record left (a torn manifest), every output is written again, except a θ_0 that
the run's later stages vouch for (their upstream digest of prepare matches).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from thinking_seeds.config import RunConfig, save_config
from thinking_seeds.data.builtin_tasks import build_splits
from thinking_seeds.data.rewards import check_reward_fn
from thinking_seeds.data.sources import SPLITS, check_user_data, load_dataset
from thinking_seeds.engine.lora import check_targets_of
from thinking_seeds.engine.models import check_model_files, load_model, resolve_model_path
from thinking_seeds.pipeline.resume import continued_config, restore_config, saved_config
from thinking_seeds.pipeline.session import Timer
from thinking_seeds.store.atomic import atomic_path
from thinking_seeds.store.checkpoints import save_checkpoint, verify_checkpoint
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.parquet_io import DataError, content_hash
from thinking_seeds.store.run_dir import RunDir

USER_SPLITS = {"train": "train_path", "validation": "val_path"}  # data.source=parquet: the run's copies


def check_inputs(run: RunDir, cfg: RunConfig) -> None:
    """Refuse, in one line and before anything is written, what the user gave that this run cannot use:
    a bad data file (check_user_data) and, until θ_0 is copied, a model directory without weights or
    tokenizer or a `model.lora.target_modules` name that is not a module of the model (its architecture
    on the meta device: no weights read). The CLI, the flow and the loop call it before the run's lock
    makes the run directory."""
    check_user_data(cfg.data)
    if cfg.cluster.kind == "ray":  # Ray missing, or no address: one line now, not a half-made run directory
        import importlib.util

        from thinking_seeds.data.ray_pool import ClusterError, cluster_address

        if importlib.util.find_spec("ray") is None:  # not imported here: that takes seconds
            raise ClusterError(
                "cluster=ray needs Ray, which is not installed here: pip install 'thinking-seeds[ray]' "
                "(or `make install`), or set cluster=local"
            )
        cluster_address(cfg.cluster.address)
    if not (run.policy(0) / "manifest.json").exists():
        base = resolve_model_path(cfg.model.path)
        check_model_files(base, key="model.path")
        if cfg.model.lora is not None:
            check_targets_of(base, cfg.model.lora)


def prepare(run: RunDir, cfg: RunConfig) -> Manifest:
    """Write config.yaml, the data splits and θ_0 (a verified copy of the base model)."""
    check_inputs(run, cfg)
    run.root.mkdir(parents=True, exist_ok=True)
    old = run.read_manifest(0, "prepare")
    recorded = old.hashes if old is not None and old.config_hash == cfg.config_hash() else {}
    restore_config(run, cfg)  # missing or damaged since the run recorded it: written again, or one line
    if run.config_path.exists():
        saved = saved_config(run)  # compared, nothing it names imported; a damaged file says so
        if saved.config_hash() != cfg.config_hash():
            continued_config(run, cfg)  # another config: the line that names its keys
            raise ValueError(
                f"run {run.root} was started with another config (hash {saved.config_hash()} != "
                f"{cfg.config_hash()}); resume it with the same preset and --set values, or choose a new --run-id"
            )
        fresh = False
    else:
        with atomic_path(run.config_path) as tmp:
            save_config(cfg, tmp)
        fresh = not run.data_dir.exists()
    t = Timer()
    with t("data"):
        if cfg.data.source != "parquet":  # generated: a built-in task or a reasoning-gym mixture
            splits = _generated_splits(run, cfg, recorded)
        else:
            splits = _user_splits(run, cfg, recorded)
    if cfg.reward.fn:  # the user's function on a real row, before any model is loaded
        try:
            check_reward_fn(cfg.reward.fn, load_dataset(run.data_dir / "validation.parquet")[0])
        except ValueError:
            if fresh:  # a refused start leaves no config behind: the fixed one (another hash) may start here
                run.config_path.unlink()
                shutil.rmtree(run.data_dir)
            raise
    with t("model_load"):
        _initial_policy(run, cfg, old, recorded, splits)
    m = Manifest("prepare", 0, cfg.config_hash(), seconds=t.seconds)
    for name, path in _outputs(run, splits, old).items():
        m.record(run, name, path)
    return m


def _outputs(run: RunDir, splits: list[str], old: Manifest | None) -> dict[str, Path]:
    """What the manifest records, in its order. A redo records the names its run recorded before, so
    the prepare digest every later stage chains to stays the same (runs from before the test split
    was recorded keep theirs)."""
    out = {"config": run.config_path, "policy": run.policy(0)}
    out.update({s: run.data_dir / f"{s}.parquet" for s in ("train", "validation", "test") if s in splits})
    if old is not None and set(old.outputs) <= set(out):
        out = {name: p for name, p in out.items() if name in old.outputs}
    return out


def _vouched(run: RunDir, path: Path, recorded: dict[str, str], name: str) -> bool:
    return path.is_file() and name in recorded and run.file_hash(path) == recorded[name]


def _generated_splits(run: RunDir, cfg: RunConfig, recorded: dict[str, str]) -> list[str]:
    """The train/validation/test files of a generated source, each either as recorded or rebuilt.

    Built into a temp folder of the run first: a split whose rebuild does not hash as recorded (the
    generator changed since the run started) is refused, and nothing is replaced."""
    names = ["train", "validation", "test"]
    paths = {s: run.data_dir / SPLITS[s] for s in names}
    if all(_vouched(run, paths[s], recorded, s) for s in names):
        return names
    run.data_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp_data_", dir=run.root))
    try:
        built = build_splits(tmp, cfg.data)
        for s in names:
            if s in recorded and run.file_hash(built[s]) != recorded[s]:
                raise DataError(
                    f"{paths[s]} does not hash as run {run.run_id} recorded, and rebuilding it from data.source="
                    f"{cfg.data.source} gives other rows (the generator changed since the run started); "
                    "restore the file from a copy of the run, or start a new run with another --run-id"
                )
        for s in names:
            if not (paths[s].is_file() and content_hash(paths[s]) == content_hash(built[s])):
                os.replace(built[s], paths[s])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return names


def _user_splits(run: RunDir, cfg: RunConfig, recorded: dict[str, str]) -> list[str]:
    """The run's copies of the user's train and validation files: kept when they hash as recorded,
    else copied again from the user's file -- refused in one line when that file no longer holds what
    the run started from (its copy would silently be another data set)."""
    run.data_dir.mkdir(parents=True, exist_ok=True)
    for split, key in USER_SPLITS.items():
        dst = run.data_dir / SPLITS[split]
        if _vouched(run, dst, recorded, split):
            continue
        src = getattr(cfg.data, key)
        with atomic_path(dst) as tmp:
            shutil.copyfile(src, tmp)  # checked above (check_inputs)
            if split in recorded and content_hash(tmp) != recorded[split]:
                raise DataError(
                    f"{dst} is damaged (it does not hash as run {run.run_id} recorded), and data.{key}={src} "
                    "no longer holds the file the run started from; restore that file (or the run's copy "
                    "from a backup) and run `ts train` again, or start a new run with another --run-id"
                )
    return list(USER_SPLITS)


def _initial_policy(run: RunDir, cfg: RunConfig, old: Manifest | None, recorded: dict[str, str], splits) -> None:
    """θ_0: kept when it hashes as recorded (or, with no record, when the later stages' upstream digest
    of prepare vouches for it), else copied again from the base model."""
    p0 = run.policy(0)
    if (p0 / "manifest.json").exists():
        keep = run.file_hash(p0) == recorded["policy"] if "policy" in recorded else _chained(run, old, splits)
        if not keep:
            aside = p0.with_name(f".old_{p0.name}_unverified")
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(p0, aside)  # atomic; a crash before the rmtree leaves a stale temp, cleaned on takeover
            shutil.rmtree(aside, ignore_errors=True)
    if not (p0 / "manifest.json").exists():
        model, tok = load_model(resolve_model_path(cfg.model.path), cfg.model.dtype)
        save_checkpoint(model, tok, run.policy_root, 0, extra={"source": cfg.model.path})
    verify_checkpoint(p0)


def _chained(run: RunDir, old: Manifest | None, splits: list[str]) -> bool:
    """With no usable record of prepare: whether its outputs as they are now give the prepare digest
    that the stages after it recorded (they read exactly these files)."""
    try:
        verify_checkpoint(run.policy(0))
    except Exception:  # noqa: BLE001 - any damage: not vouched for
        return False
    wanted = set()
    for stage, k in (("evaluate", -1), ("snapshot", 0), ("seeds", 0), ("update", 0)):
        m = run.read_manifest(k, stage)
        if m is not None and "prepare@0" in m.upstream:
            wanted.add(m.upstream["prepare@0"])
    if not wanted or not run.config_path.is_file():
        return False
    full = {"config": run.config_path, "policy": run.policy(0)}
    full.update({s: run.data_dir / SPLITS[s] for s in splits})
    for names in (list(full), [n for n in full if n != "test"]):  # runs from before the test split was recorded
        if not all(full[n].exists() for n in names):
            continue
        probe = Manifest("prepare", 0, "")
        for n in names:
            probe.record(run, n, full[n])
        if probe.digest in wanted:
            return True
    return False
