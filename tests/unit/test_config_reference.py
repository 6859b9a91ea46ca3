"""docs/configuration.md is generated from the config models (thinking_seeds.config.reference): it must
be what the generator writes now, hold every key `ts config keys` lists, and show each field's real type,
default, range and help."""

from __future__ import annotations

from pathlib import Path

from thinking_seeds.config import RunConfig
from thinking_seeds.config.reference import REGENERATE, config_keys, main, reference_markdown
from thinking_seeds.flows.cli.config import config_key_rows

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_reference_is_fresh():
    assert PAGE.is_file(), f"docs/configuration.md is missing: run `{REGENERATE}` from the repository root"
    assert PAGE.read_text(encoding="utf-8") == reference_markdown(), (
        f"docs/configuration.md is stale (a config field changed): run `{REGENERATE}` from the repository root "
        "and commit the page"
    )


def test_every_key_ts_config_keys_lists_is_in_the_reference():
    listed = {row[0] for row in config_key_rows()}
    documented = {k.key for k in config_keys()}
    assert listed <= documented, sorted(listed - documented)
    # and the fields inside optional sections and lists, which `ts config keys` does not descend into
    assert {"model.lora.r", "model.lora.target_modules", "data.tasks[].name", "data.tasks[].weight"} <= documented


def test_rows_carry_the_models_type_default_range_help_and_hash():
    rows = {k.key: k for k in config_keys()}
    field = RunConfig.model_fields["prefix"].annotation.model_fields["ratio_max"]
    ratio_max = rows["prefix.ratio_max"]
    assert (ratio_max.type, ratio_max.default) == ("float", str(field.default))
    assert ratio_max.allowed == "≥ 0.0; ≤ 1.0" and ratio_max.help == field.description
    assert rows["logger"].default == "[console]"  # a default_factory, called
    assert rows["device"].hashed == "no" and rows["update.lr_warmup_steps"].hashed == "when set"
    assert rows["update.lr"].hashed == "yes" and rows["pipeline.max_staleness"].hashed == "when set"
    assert "`thinking_seeds`" in rows["algorithm"].allowed
    line = next(ln for ln in reference_markdown().splitlines() if ln.startswith("| `reward.fn` |"))
    assert line.count(" | ") == 5, line  # the help text's own `|` are escaped: still six cells


def test_cli_writes_the_page_and_refuses_a_missing_folder(tmp_path, capsys):
    out = tmp_path / "configuration.md"
    assert main(["--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == reference_markdown()
    assert main(["--out", str(tmp_path / "nowhere" / "configuration.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0] and "--out" in err[0]
