"""Config: presets + algorithm overlays + dotted overrides; mistakes name the key and the range."""

import pytest

from thinking_seeds.config import ALGORITHMS, ConfigError, load_config, load_saved_config, parse_overrides, save_config


def test_tiny_preset_and_overrides():
    cfg = load_config("tiny", ["prefix.ratio_max=0.5", "rollout.group_size=6", "update.lr=3e-4"])
    assert cfg.algorithm == "thinking_seeds"
    assert cfg.prefix.ratio_max == 0.5 and cfg.rollout.group_size == 6 and cfg.update.lr == 3e-4


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_every_algorithm_overlay_is_valid(algo):
    cfg = load_config("tiny", [f"algorithm={algo}"])
    assert cfg.algorithm == algo
    assert cfg.seeded == (algo not in ("grpo", "dr_grpo"))


def test_overlays_set_the_method():
    assert load_config("tiny", ["algorithm=dr_grpo"]).loss.loss_agg_mode == "seq-mean-token-sum-norm"
    luffy = load_config("tiny", ["algorithm=luffy"])
    assert (luffy.prefix.loss, luffy.prefix.source, luffy.prefix.ratio_min) == ("shaped", "dataset", 1.0)
    assert load_config("tiny", ["algorithm=prefix_context"]).prefix.loss == "context"


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["prefix.ratio_mx=0.5"], "unknown config key 'prefix.ratio_mx'"),
        (["rollout.seeds_per_group=9"], "rollout.seeds_per_group=9 must be in [0, rollout.group_size=8]"),
        (["prefix.ratio_min=0.7"], "prefix.ratio_min=0.7 must be <= prefix.ratio_max=0.6"),
        (["update.lr=-1"], "update.lr"),
        (["rollout.group_size=-2"], "rollout.group_size"),
        (["algorithm=grpo", "rollout.seeds_per_group=2"], "algorithm=grpo is on-policy"),
        (["algorithm=seq_mix", "prefix.ratio_min=0.5"], "prefix.ratio_min and ratio_max must be 1.0"),
        (["algorithm=nope"], "unknown method 'nope'"),
        (["prefix"], "must look like section.key=value"),
    ],
)
def test_bad_values_are_rejected_with_the_key(overrides, needle):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", overrides)
    assert needle in str(e.value)


def test_unknown_preset_lists_known_ones():
    with pytest.raises(ConfigError, match="unknown preset 'nope'.*tiny"):
        load_config("nope")


def test_parse_overrides_nested_and_typed():
    assert parse_overrides(["a.b=1", "a.c=x", "d=true"]) == {"a": {"b": 1, "c": "x"}, "d": True}


def test_round_trip_and_hash(tmp_path):
    cfg = load_config("tiny", ["seed=3"])
    save_config(cfg, tmp_path / "c.yaml")
    back = load_saved_config(tmp_path / "c.yaml")
    assert back == cfg and back.config_hash() == cfg.config_hash()
    assert load_config("tiny", ["seed=4"]).config_hash() != cfg.config_hash()


def test_missing_tracker_package_names_the_extra(monkeypatch):
    """A `logger` whose package is missing names the extra to install (the trackers themselves:
    e2e/test_tracking.py)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'thinking-seeds\[mlflow\]'"):
        load_config("tiny", ["logger=[console, mlflow]"])
    with pytest.raises(ConfigError, match="logger"):
        load_config("tiny", ["logger=[console, neptune]"])


def test_lora_requests_is_hashed_only_off_its_default():
    """rollout.lora_requests (vLLM + model.lora) joined the config after runs existed: at its default the hash
    is the one those runs recorded; the other choice samples with other float rounding, so it is hashed."""
    from thinking_seeds.config.sections import LORA_REQUESTS_DEFAULT

    plain = load_config("tiny", [])
    at_default = load_config("tiny", [f"rollout.lora_requests={str(LORA_REQUESTS_DEFAULT).lower()}"])
    other = load_config("tiny", [f"rollout.lora_requests={str(not LORA_REQUESTS_DEFAULT).lower()}"])
    assert plain.config_hash() == at_default.config_hash() != other.config_hash()


def test_the_launcher_of_one_training_process_is_not_hashed():
    """The persistent trainer is the default; with one process it computes θ_{k+1} bit for bit as in
    process does (e2e/test_update_processes.py), so the two share a hash (a run resumes under either,
    and runs from before the default changed keep theirs); a group of two is hashed apart."""
    default = load_config("tiny")
    assert default.update.launcher == "accelerate"
    in_process = load_config("tiny", ["update.launcher=in_process"])
    assert default.config_hash() == in_process.config_hash()
    assert load_config("tiny", ["update.launcher=accelerate_per_update"]).config_hash() == default.config_hash()
    two = ["update.num_processes=2"]
    assert (
        load_config("tiny", two).config_hash()
        != load_config("tiny", [*two, "update.launcher=accelerate_per_update"]).config_hash()
    )


def test_the_trainer_reads_a_config_without_importing_what_it_names_outside_us(tmp_path):
    """The trainer process trains on scored rollouts: a reward module that only the driver can import
    (on its sys.path, not the trainer's) is no error there, and still one in the driver."""
    import yaml

    path = tmp_path / "config.yaml"
    cfg = load_config("tiny")
    data = cfg.model_dump(mode="json") | {"reward": {"backend": "custom", "fn": "nowhere_to_be_found:score"}}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="does not import"):
        load_saved_config(path)
    assert load_saved_config(path, check_outside=False).reward.fn == "nowhere_to_be_found:score"
    save_config(cfg, path)  # and a plain config reads the same either way
    assert load_saved_config(path, check_outside=False) == load_saved_config(path)
