"""YAML is read with limits: an alias bomb, a cycle, deep nesting, a huge or binary file is refused in
one line before anything is expanded -- as a preset, a run's config.yaml (reported as damaged), a --set
value, and in `ts runs` / `ts sql` over all runs, where the other runs are still listed."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from thinking_seeds.config import ConfigError, load_config, load_saved_config, parse_overrides
from thinking_seeds.yaml_limits import MAX_YAML_BYTES, YamlLimitError, load_bounded


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """~470 bytes that expand to width**levels strings (9**9: 387 million) in whatever walks them."""
    lines = ['a0: &a0 ["lol"' + ', "lol"' * (width - 1) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (alias_bomb(), "expands to more than"),
        ("a: &a [*a]\n", "alias to itself"),
        ("a: " + "[" * 500 + "]" * 500 + "\n", "levels deep"),
        ("a: " + "x" * (MAX_YAML_BYTES + 1) + "\n", "more than"),
    ],
    ids=["alias_bomb", "cycle", "deep", "huge"],
)
def test_hostile_yaml_is_refused_unexpanded(text, why):
    t = time.perf_counter()
    with pytest.raises(YamlLimitError, match=why):
        load_bounded(text)
    assert time.perf_counter() - t < 2.0


def test_ordinary_yaml_with_an_anchor_still_loads():
    assert load_bounded("a: &x {k: 1}\nb: *x\nc: [1, 2.5, text]\n") == {
        "a": {"k": 1},
        "b": {"k": 1},
        "c": [1, 2.5, "text"],
    }


@pytest.mark.parametrize("content", [alias_bomb().encode(), b"\xff\xfe\x00binary", b"model: {path: x\n"])
def test_a_damaged_config_yaml_is_one_line_saying_so(tmp_path, content):
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_saved_config(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    assert "is damaged or not a config" in msg or "is not valid YAML" in msg


def test_a_bomb_as_preset_or_set_value_is_one_line(tmp_path):
    preset = tmp_path / "bomb.yaml"
    preset.write_text(alias_bomb())
    with pytest.raises(ConfigError, match="is damaged or not a config"):
        load_config(str(preset))
    with pytest.raises(ConfigError, match="override seed=...: the value expands"):
        parse_overrides(["seed=" + alias_bomb().replace("\n", ", ").join("{}")])


def test_ts_runs_and_sql_over_all_runs_survive_a_bomb_in_one_run(tmp_path, monkeypatch):
    from thinking_seeds.flows.cli import app

    monkeypatch.setenv("TS_RUNS_DIR", str(tmp_path))
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "config.yaml").write_text("algorithm: grpo\niterations: 3\nseed: 1\n")
    (tmp_path / "bomb").mkdir()
    (tmp_path / "bomb" / "config.yaml").write_text(alias_bomb())
    for args in (["runs", "-f", "csv"], ["sql", "SELECT run_id, algorithm FROM configs ORDER BY run_id", "-f", "csv"]):
        t = time.perf_counter()
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        assert time.perf_counter() - t < 20
        out = " ".join(res.output.split())
        assert "bomb/config.yaml is damaged (it expands to more than" in out and "good,grpo" in out, out
