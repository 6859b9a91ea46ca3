"""A run started before token-budget micro-batches became the default (its config.yaml written by the
old code, without the `update.max_tokens_per_micro_batch` key, or with it at null) is resumed by
today's code with today's preset, whose budget is set: it keeps its config hash, continues with
padded micro-batches, redoes no finished stage, and ends exactly where the uninterrupted old run ends."""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.helpers.resume import _assert_same_results, _completed_files
from tests.helpers.tiny import copy_run
from thinking_seeds.config import load_config, load_saved_config, save_config
from thinking_seeds.config.loading import _YamlDumper
from thinking_seeds.pipeline import stage_prepare
from thinking_seeds.pipeline.loop import train
from thinking_seeds.pipeline.resume import continued_config
from thinking_seeds.store.run_dir import RunDir

KEY = "max_tokens_per_micro_batch"


def _old_save_config(cfg, path):
    """save_config as the code before the field wrote config.yaml: every key but this one."""
    data = cfg.model_dump(mode="json")
    del data["update"][KEY]
    path.write_text(yaml.dump(data, Dumper=_YamlDumper, sort_keys=False))


@pytest.fixture(scope="module")
def old_run(tmp_path_factory, tiny_overrides):
    """A finished 2-iteration run of the old code (padded micro-batches, config.yaml without the key)."""
    cfg = load_config("tiny", [*tiny_overrides, "loss.entropy_coeff=0.01", "update.lr=1e-3", f"update.{KEY}=null"])
    mp = pytest.MonkeyPatch()
    mp.setattr(stage_prepare, "save_config", _old_save_config)
    try:
        run = train(RunDir.for_run("old", tmp_path_factory.mktemp("old-default")), cfg)
    finally:
        mp.undo()
    return run, cfg


def test_old_run_resumed_with_todays_preset_is_the_same_run(old_run, tiny_overrides, tmp_path):
    ref, old_cfg = old_run
    assert KEY not in yaml.safe_load(ref.config_path.read_text())["update"]
    today = load_config("tiny", [*tiny_overrides, "loss.entropy_coeff=0.01", "update.lr=1e-3"])
    assert today.update.max_tokens_per_micro_batch is not None  # the new default is on ...
    assert today.config_hash() != old_cfg.config_hash()  # ... and is another computation
    assert load_saved_config(ref.config_path).config_hash() == old_cfg.config_hash()  # read as it was written

    run = copy_run(ref, tmp_path)  # stopped after iteration 0: iteration 1 is lost
    shutil.rmtree(run.manifest_path(1, "seeds").parent)
    kept = _completed_files(run)
    train(run, today)

    assert _completed_files(run).items() >= kept.items(), "a finished stage of the old run was redone"
    for k in range(old_cfg.iterations):
        for stage in ("seeds", "continuation", "verify", "update", "evaluate"):
            assert run.read_manifest(k, stage).config_hash == old_cfg.config_hash()
    _assert_same_results(run, ref, old_cfg.iterations)  # bit for bit: θ, AdamW, rollouts, prefixes, evaluation


def test_a_null_key_keeps_its_value_and_a_changed_setting_is_still_refused(old_run, tiny_overrides, tmp_path):
    _, old_cfg = old_run
    base = [*tiny_overrides, "loss.entropy_coeff=0.01", "update.lr=1e-3"]
    run = RunDir.for_run("old", tmp_path)
    run.root.mkdir(parents=True)
    save_config(old_cfg, run.config_path)  # as code that knew the field wrote it: the key, at null
    assert yaml.safe_load(run.config_path.read_text())["update"][KEY] is None
    today = load_config("tiny", base)
    kept = continued_config(run, today)
    assert kept.update.max_tokens_per_micro_batch is None and kept.config_hash() == old_cfg.config_hash()
    with pytest.raises(ValueError, match=r"update\.lr 0\.001 -> 0\.002"):
        continued_config(run, load_config("tiny", [*base, "update.lr=2e-3"]))
    # a run started with today's budget keeps it: the rule is for the old default only
    fresh = RunDir.for_run("fresh", tmp_path)
    fresh.root.mkdir(parents=True)
    save_config(today, fresh.config_path)
    assert continued_config(fresh, today).update.max_tokens_per_micro_batch == today.update.max_tokens_per_micro_batch
