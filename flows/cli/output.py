"""What `ts` prints: tables (rich, CSV or JSON), one-line errors and warnings on stderr, and the
command line that produced a result (for a report to quote).

rich loads when something is printed with it (a table, an error line), not with this module: `ts sql
-f csv` prints none, and rich's import is ~0.02 s of its start; the table, CSV and number helpers load
when a command prints its first table.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

MAX_TABLE_ROWS = 1000  # a rich table longer than this is unreadable anyway


class OutputFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def console() -> Console:
    """stdout console; when stdout is not a terminal, wide enough that tables do not wrap."""
    from rich.console import Console

    c = Console(highlight=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(highlight=False, width=200)
    return c


def error_line(text: str, label: str = "error: ", style: str = "red") -> None:
    """One line on stderr: what was wrong, where, how to fix (no traceback)."""
    from rich.console import Console
    from rich.text import Text

    msg = Text(label, style=f"bold {style}")
    msg.append(" ".join(text.split()) or "error", style=style)
    Console(stderr=True, soft_wrap=True, highlight=False).print(msg)


def detail_lines(text: str) -> None:
    """Supporting text under an error line (e.g. the tails of failed runs' logs), verbatim."""
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True, soft_wrap=True, highlight=False).print(Text(text.rstrip("\n"), style="dim"))


def warn(notes: list[str]) -> None:
    for note in notes:
        error_line(note, "warning: ", "yellow")


def cell(v: Any) -> str:
    from thinking_seeds.evals.report import format_cell

    return format_cell(v)


def _jsonable(v: Any) -> Any:
    import math
    from datetime import date, datetime
    from decimal import Decimal

    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _csv_cell(v: Any) -> Any:
    from datetime import date, datetime

    if v is None:
        return ""
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(_jsonable(v))
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    return v


def emit(
    columns: list[str], rows: list[tuple], fmt: OutputFormat, title: str | None = None, numeric: set[str] | None = None
) -> None:
    """Print rows as a rich table (at most MAX_TABLE_ROWS, then a row count), CSV or JSON."""
    if fmt is OutputFormat.json:
        typer.echo(json.dumps([{c: _jsonable(v) for c, v in zip(columns, r, strict=True)} for r in rows], indent=2))
        return
    if fmt is OutputFormat.csv:
        import csv

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([_csv_cell(v) for v in r])
        return
    note = f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    if len(rows) > MAX_TABLE_ROWS:
        note += f", first {MAX_TABLE_ROWS} shown (--format csv or json prints all)"
    numeric = numeric_columns(columns, rows) if numeric is None else numeric  # over all rows, not only those shown
    print_rich_table(columns, rows[:MAX_TABLE_ROWS], title, note, numeric)


def numeric_columns(columns: list[str], rows: list[tuple]) -> set[str]:
    """The columns whose values are all numbers (right-aligned in a table)."""
    from decimal import Decimal

    return {
        c
        for i, c in enumerate(columns)
        if rows and all(isinstance(r[i], (int, float, Decimal)) or r[i] is None for r in rows)
    }


def print_rich_table(
    columns: list[str],
    rows: list[tuple],
    title: str | None,
    note: str,
    numeric: set[str] | None = None,
    clean: Callable[[str], str] = str,
) -> None:
    """A rich table of `rows`, then `note` under it: the `numeric` columns (default: numeric_columns)
    right-aligned, `clean` applied to every header's and cell's text."""
    from rich.table import Table
    from rich.text import Text

    if numeric is None:
        numeric = numeric_columns(columns, rows)
    table = Table(title=title, header_style="bold cyan", show_lines=False)
    for c in columns:
        table.add_column(clean(c), justify="right" if c in numeric else "left", overflow="fold")
    for r in rows:
        table.add_row(*(Text(clean(cell(v))) for v in r))  # Text: no rich markup in data
    con = console()
    con.print(table)
    con.print(Text(note, style="dim"))


def _param_args(ctx: Any, skip: frozenset[str]) -> list[str]:
    """One command's parsed parameters written back as arguments, in declaration order: options by
    their long name, flags only when they differ from their default, options left unset (None) out.
    Values that came from a default or an environment variable are left out too: the line shows
    what the user typed, so it reads the same on another machine (no local TS_RUNS_DIR)."""
    command, params = ctx.command, ctx.params
    out: list[str] = []
    for p in command.params:
        if p.name in skip or p.name not in params or getattr(p, "hidden", False):
            continue
        source = ctx.get_parameter_source(p.name)  # by name: typer may bring its own copy of click
        if source is not None and source.name in ("DEFAULT", "ENVIRONMENT"):
            continue
        value = params[p.name]
        if p.param_type_name == "argument":
            out += [_text(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None]
            continue
        name = next((o for o in p.opts if o.startswith("--")), p.opts[0])
        if getattr(p, "is_flag", False) and getattr(p, "is_bool_flag", True):
            if value != p.default:
                off = [o for o in getattr(p, "secondary_opts", []) if o.startswith("--")]
                out += [name] if value else off[:1]
        elif getattr(p, "multiple", False):
            out += [x for v in value or () for x in (name, _text(v))]
        elif value is not None:
            out += [name, _text(value)]
    return out


def _text(v: Any) -> str:
    return str(v.value) if isinstance(v, Enum) else str(v)


def given(ctx: Any, name: str) -> bool:
    """Whether the user typed option `name` (by its parameter name), whatever the value: not its default."""
    return ctx.get_parameter_source(name).name != "DEFAULT"  # by name: typer's own click


def command_line(ctx: Any, skip: tuple[str, ...] = ()) -> str:
    """The command line that reproduces this invocation (`ts [--runs-dir D] compare --preset ...`),
    rebuilt from the values click parsed for every level of the command; parameters named in
    `skip` are left out. Shell-quoted, for a report to quote."""
    chain = []
    while ctx is not None:
        chain.append(ctx)
        ctx = ctx.parent
    argv: list[str] = []
    for i, c in enumerate(reversed(chain)):
        argv += ["ts" if i == 0 else c.info_name] + _param_args(c, frozenset(skip))
    return " ".join(shlex.quote(a) for a in argv)
