"""`ts config show` (a resolved configuration as YAML) and `ts config keys` (every key usable with
--set: type, default, allowed values, help -- read from RunConfig's fields)."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

import typer

from thinking_seeds.flows.cli.output import OutputFormat, console, emit

config_app = typer.Typer(help="Show a resolved configuration, or every configuration key.", no_args_is_help=True)


@config_app.command("show")
def config_show(
    preset: str = typer.Option("tiny", "--preset", "-p", help="Preset name or YAML path."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key: section.key=value (repeatable)."),
) -> None:
    """Print the resolved configuration as YAML (loadable again as a preset path)."""
    import yaml

    from thinking_seeds.config import load_config

    cfg = load_config(preset, set_)
    text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    con = console()
    if con.is_terminal:
        from rich.syntax import Syntax

        con.print(Syntax(text, "yaml", background_color="default"))
    else:
        typer.echo(text, nl=False)


@config_app.command("keys")
def config_keys(
    filter_: str | None = typer.Argument(None, metavar="[FILTER]", help="Only keys containing this text."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", "-f", help="Output format."),
) -> None:
    """Every configuration key (usable with --set) with its type, default, allowed values and help."""
    rows = [r for r in config_key_rows() if not filter_ or filter_.lower() in r[0].lower()]
    emit(["key", "type", "default", "allowed", "help"], rows, fmt, title="configuration keys", numeric=set())


def config_key_rows() -> list[tuple[str, str, str, str, str]]:
    """(dotted key, type, default, allowed, help) for every leaf field of RunConfig."""
    from pydantic import BaseModel

    from thinking_seeds.config import RunConfig

    rows: list[tuple[str, str, str, str, str]] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, f"{prefix}{name}.")
                continue
            rows.append(
                (prefix + name, _type_name(ann), _default_text(field.default), _allowed(field), field.description or "")
            )

    walk(RunConfig, "")
    return rows


def _type_name(ann: Any) -> str:
    origin = get_origin(ann)
    if origin is Literal:
        return "choice"
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(ann))
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in get_args(ann))}]"
    if ann is type(None):
        return "None"
    return getattr(ann, "__name__", str(ann))


def _allowed(field: Any) -> str:
    ann = field.annotation
    choices = [a for a in get_args(ann) if get_origin(a) is Literal] + ([ann] if get_origin(ann) is Literal else [])
    parts = [" | ".join(str(x) for x in get_args(c)) for c in choices]
    for meta in field.metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                parts.append(f"{sym} {getattr(meta, attr)}")
    return ", ".join(parts)


def _default_text(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, tuple):
        return "[" + ", ".join(_default_text(x) for x in v) + "]"
    return str(v)
