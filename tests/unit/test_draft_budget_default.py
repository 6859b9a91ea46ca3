"""prefix.ratio_of=budget is the default (issue 53: drafts generated only as far as their cut, so
seeding costs no more than GRPO); a run or a comparison recorded before keeps whole drafts and its
config hash (config/run_config.py DEFAULTS_BEFORE), and settings that read whole drafts get them."""

from __future__ import annotations

import pytest
import yaml

from thinking_seeds.config import ConfigError, load_config, load_saved_config, save_config
from thinking_seeds.experiments.recorded_defaults import kept_defaults
from thinking_seeds.pipeline.resume import continued_config
from thinking_seeds.store.run_dir import RunDir


def test_drafts_stop_at_their_cut_unless_a_setting_reads_whole_drafts():
    assert load_config("tiny").prefix.ratio_of == "budget"
    assert load_config("tiny", ["prefix.filter=correct_draft"]).prefix.ratio_of == "draft"
    assert load_config("tiny", ["prefix.cut=steps"]).prefix.ratio_of == "draft"
    assert load_config("tiny", ["algorithm=thinking_seeds_adaptive"]).prefix.ratio_of == "draft"
    with pytest.raises(ConfigError, match="correct_draft"):  # asked for both: still refused
        load_config("tiny", ["prefix.filter=correct_draft", "prefix.ratio_of=budget"])


def test_a_run_started_with_whole_drafts_keeps_them_and_its_hash(tmp_path):
    old = load_config("tiny", ["prefix.ratio_of=draft"])
    today = load_config("tiny")
    assert today.config_hash() != old.config_hash()  # another computation
    for written_by in ("a config.yaml holding the key", "code before the key existed"):
        run = RunDir.for_run(f"old-{len(written_by)}", tmp_path)
        run.root.mkdir(parents=True)
        save_config(old, run.config_path)
        if written_by.startswith("code"):
            data = yaml.safe_load(run.config_path.read_text())
            del data["prefix"]["ratio_of"]
            run.config_path.write_text(yaml.safe_dump(data, sort_keys=False))
            assert load_saved_config(run.config_path).config_hash() == old.config_hash()
        kept = continued_config(run, today)
        assert kept.prefix.ratio_of == "draft" and kept.config_hash() == old.config_hash(), written_by
    fresh = RunDir.for_run("fresh", tmp_path)
    fresh.root.mkdir(parents=True)
    save_config(today, fresh.config_path)
    assert continued_config(fresh, today).prefix.ratio_of == "budget"  # the rule is for the old value only


def test_a_comparison_recorded_before_keeps_whole_drafts():
    for method in ("thinking_seeds", "grpo"):  # grpo too: the key is in every run's config and hash
        old = load_config("tiny", [f"algorithm={method}", "prefix.ratio_of=draft"])
        planned = load_config("tiny", [f"algorithm={method}"])
        kept = kept_defaults(planned, [], old.model_dump(mode="json"))
        assert 'prefix.ratio_of="draft"' in kept, method
        assert load_config("tiny", [f"algorithm={method}", *kept]).config_hash() == old.config_hash()
        assert kept_defaults(planned, [], old.config_hash()) == kept  # a registered hash finds the same
    named = ["prefix.ratio_of=budget"]  # the comparison's own choice is never overridden
    assert kept_defaults(load_config("tiny", named), named, old.model_dump(mode="json")) == ()
    assert kept_defaults(planned, [], None) == ()  # a new comparison: today's default
