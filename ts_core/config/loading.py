"""Building a RunConfig: presets, algorithm overlays, `--set` overrides, YAML in and out, and
errors that name the dotted key, the value and what is allowed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from thinking_seeds.algorithms import ALGORITHMS
from thinking_seeds.assets import PRESETS_DIR  # package data: data/presets in a checkout
from thinking_seeds.config.run_config import DEFAULTS_BEFORE, RunConfig
from thinking_seeds.config.sections import CHECK_OUTSIDE
from thinking_seeds.yaml_limits import YamlLimitError, load_bounded, read_bounded

__all__ = [
    "EXTENSION_FILE",
    "ConfigError",
    "available_presets",
    "config_from_dict",
    "load_config",
    "load_saved_config",
    "parse_overrides",
    "save_config",
]


class ConfigError(ValueError):
    """A configuration mistake, with the dotted key and how to fix it in the message."""


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus YAML 1.2's floats that YAML 1.1 reads as strings: `1e-4`, `3E5`,
    `1.0e4` (no dot or no exponent sign) are numbers, as a user means them -- with strict config
    types a string would be refused for a float key."""


class _YamlDumper(yaml.SafeDumper):
    """The same resolver when writing: a string such as '1e5' is quoted, so it reads back as text."""


for _cls in (_YamlLoader, _YamlDumper):
    _cls.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = read_bounded(path, _YamlLoader) or {}
    except YamlLimitError as e:  # an alias bomb, a huge or binary file: damaged, or not a config
        raise ConfigError(f"{path} is damaged or not a config: it {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of config sections, got {type(data).__name__}")
    return data


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def _preset_path(preset: str) -> Path:
    p = Path(preset)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    path = PRESETS_DIR / f"{preset}.yaml"
    if not path.exists() and (p.suffix in (".yaml", ".yml") or "/" in preset or os.sep in preset):
        # meant as a file's path: name that path, not the preset file it is not
        raise ConfigError(
            f"no file {preset}: check the path of your YAML config, or use a preset ({', '.join(available_presets())})"
        )
    if not path.exists():
        raise ConfigError(
            f"unknown preset {preset!r}: no file {path}. Known presets: {', '.join(available_presets())} "
            "(or pass a path to a YAML file)"
        )
    return path


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """`["prefix.ratio_max=0.5", "algorithm=grpo"]` -> nested dict; values parsed as YAML scalars."""
    nested: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value (e.g. prefix.ratio_max=0.5)")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} has an empty key")
        try:
            value = load_bounded(raw, _YamlLoader) if raw.strip() else None
        except YamlLimitError as e:
            raise ConfigError(f"override {key}=...: the value {e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item[:200]!r}: not a YAML value ({' '.join(str(e).split())})") from None
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is set twice, once as a value")
        node[parts[-1]] = value
    return nested


def _explain(err: ValidationError, origin: str) -> ConfigError:
    lines = []
    for e in err.errors():
        key = ".".join(str(x) for x in e["loc"]) or "(root)"
        if e["type"] == "extra_forbidden":
            section = _section_for(e["loc"][:-1])
            known = ", ".join(sorted(section.model_fields)) if section else "?"
            lines.append(f"unknown config key {key!r}; known keys here: {known}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            # A section-level check already names its keys and values; a field check gets both added.
            if e["type"] in _WRONG_TYPE:  # strict types: say what the key takes, and what it got
                value = e.get("input")
                lines.append(f"{key}: must be {_WRONG_TYPE[e['type']]} (got {value!r}, which is {_yaml_type(value)})")
            elif isinstance(e.get("input"), dict):
                lines.append(msg)
            else:
                lines.append(f"{key}: {msg} (got {e.get('input')!r})")
    return ConfigError(f"invalid configuration ({origin}):\n  " + "\n  ".join(lines))


# pydantic's strict type errors -> what the key allows, in the words of a YAML value.
_WRONG_TYPE = {
    "int_type": "a whole number, e.g. 3",
    "float_type": "a number, e.g. 0.5 or 1e-4",
    "bool_type": "true or false",
    "string_type": "text",
    "list_type": "a list, e.g. [a, b]",
    "tuple_type": "a list, e.g. [0.9, 0.999]",
    "dict_type": "a mapping, e.g. {key: value}",
    "model_type": "a mapping of this section's keys",
}


def _yaml_type(value: Any) -> str:
    """The kind of value the user wrote, as YAML read it (a quoted "3" is text, `true` a bool)."""
    return {
        bool: "a bool",
        int: "a whole number",
        float: "a number",
        str: "text",
        list: "a list",
        dict: "a mapping",
        type(None): "null",
    }.get(type(value), f"a {type(value).__name__}")


def _section_for(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] = RunConfig
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return None
        model = field.annotation
    return model


def load_config(preset: str = "tiny", overrides: list[str] | None = None) -> RunConfig:
    """Build a validated RunConfig from a preset name (or YAML path), its algorithm overlay and overrides."""
    path = _preset_path(preset)
    base = _read_yaml(path)
    over = parse_overrides(overrides or [])
    algorithm = over.get("algorithm", base.get("algorithm", RunConfig.model_fields["algorithm"].default))
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm: unknown method {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    overlay = _read_yaml(PRESETS_DIR / "algorithms" / f"{algorithm}.yaml")
    merged = _deep_merge(_deep_merge(base, overlay), over)
    merged["algorithm"] = algorithm
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as e:
        raise _explain(e, f"preset {path}, algorithm overlay {algorithm}, overrides {overrides or []}") from None


def config_from_dict(data: dict[str, Any], origin: str = "dict", check_outside: bool = True) -> RunConfig:
    """Validate a full config (e.g. a run directory's config.yaml) with the same error messages.

    check_outside=False skips importing what it names outside us (reward fn, trackers, reasoning-gym
    names): for the trainer process, which uses none of them.
    """
    try:
        return RunConfig.model_validate(data, context={CHECK_OUTSIDE: check_outside})
    except ValidationError as e:
        raise _explain(e, origin) from None


def save_config(cfg: RunConfig, path: Path) -> None:
    path.write_text(yaml.dump(cfg.model_dump(mode="json"), Dumper=_YamlDumper, sort_keys=False))


# Beside a run's config.yaml: {"iterations": N} once `ts train` extended the run. config.yaml itself is
# written once, at the start: its bytes are hashed into the prepare manifest, which every stage chains to.
EXTENSION_FILE = "extension.json"


def load_saved_config(path: Path, check_outside: bool = True) -> RunConfig:
    """A run directory's config.yaml, with the run's extension (EXTENSION_FILE) applied when it has one."""
    data = _read_yaml(path)
    # A key written before its field existed: the value it meant then.
    for (section, key), before in DEFAULTS_BEFORE.items():
        part = data.get(section, {})
        if isinstance(part, dict) and key not in part:
            data = {**data, section: {**part, key: before}}
    ext = path.with_name(EXTENSION_FILE)
    if ext.is_file():
        try:
            iterations = json.loads(ext.read_text())["iterations"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f'{ext} is damaged ({e}); it should read {{"iterations": N}}') from None
        data = {**data, "started_iterations": data.get("started_iterations") or data.get("iterations")}
        data["iterations"] = iterations
    return config_from_dict(data, origin=str(path), check_outside=check_outside)
