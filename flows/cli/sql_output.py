"""What `ts sql` prints: only what it fetches, and no byte a terminal would obey.

A table shows at most MAX_TABLE_ROWS rows, and only those (and one more, to know there are more)
are fetched; CSV and JSON are written as DuckDB hands the rows over, in batches (store/sql.py
`stream`), and stop with one line past --max-rows or --max-bytes, the output so far still well
formed. Control characters in the data (an escape sequence that sets the terminal's title or
clears it) are printed escaped, as \\x1b; JSON escapes them itself.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from thinking_seeds.flows.cli.output import MAX_TABLE_ROWS, OutputFormat, _csv_cell, _jsonable, print_rich_table

__all__ = ["OutputLimit", "escape_controls", "print_stream", "print_table"]

# C0 and C1 control characters and DEL, but the newline and the tab a cell may hold.
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if chr(c) not in "\n\t"}


_AS_IS = frozenset({int, float, str, bool})  # what the csv writer prints as _csv_cell would (the rest: through it)

# DuckDB types whose values the csv writer prints as _csv_cell would (None too: an empty cell): a batch of
# only these is written as it comes, without a look at each cell (62,520 rows x 7: 0.07 s)
_PLAIN_TYPES = frozenset(
    "BOOLEAN TINYINT SMALLINT INTEGER BIGINT HUGEINT UTINYINT USMALLINT UINTEGER UBIGINT UHUGEINT".split()
    + ["FLOAT", "DOUBLE", "VARCHAR"]
)


_JSON_AS_IS = frozenset({int, str, bool, type(None)})  # floats go through _jsonable: NaN is null


class OutputLimit(ValueError):
    """More rows or bytes than `ts sql` was allowed to print; the message says how to get the rest."""


def escape_controls(text: str) -> str:
    """`text` with every control character but newline and tab written as \\xNN."""
    return text.translate(_CONTROLS)


def print_table(columns: list[str], rows: list[tuple], more: bool, title: str | None) -> None:
    """A rich table of `rows` (at most MAX_TABLE_ROWS), then a line saying how many, or that there are more."""
    shown = rows[:MAX_TABLE_ROWS]
    if more:
        note = f"first {len(shown)} rows shown; the query has more (--format csv or json prints them all)"
    else:
        note = f"{len(shown)} row{'s' if len(shown) != 1 else ''}"
    print_rich_table(columns, shown, title, note, clean=escape_controls)


def print_stream(
    columns: list[str],
    batches: Any,
    fmt: OutputFormat,
    max_rows: int | None,
    max_bytes: int | None,
    types: list[str] | None = None,
) -> int:
    """Write the rows of `batches` as CSV or JSON to stdout, a batch at a time as they come; the number
    of rows. Past `max_rows` rows or `max_bytes` bytes (None: no limit; the bytes are checked after each
    batch) the output is closed (JSON stays one valid array) and OutputLimit raised. `types`: DuckDB's
    type of each column, when known (CSV cells of plain types are written without a look at each)."""
    plain = types is not None and all(t in _PLAIN_TYPES or t.startswith("DECIMAL(") for t in types)
    import csv
    import io

    out = sys.stdout
    written = rows = 0

    def write(text: str) -> None:
        nonlocal written
        out.write(text)
        written += len(text.encode("utf-8", "replace"))

    def csv_chunk(values: list) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(values)
        return escape_controls(buf.getvalue())

    def json_chunk(batch: list[tuple]) -> str:
        objs = [
            {c: v if type(v) in _JSON_AS_IS else _jsonable(v) for c, v in zip(columns, r, strict=True)} for r in batch
        ]
        text = json.dumps(objs, indent=2)
        return text[2:-2]  # the objects, each line indented, without the list's brackets

    write(csv_chunk([columns]) if fmt is OutputFormat.csv else "[")
    stopped = None
    for batch in batches:
        if max_rows is not None and rows + len(batch) > max_rows:
            batch, stopped = batch[: max_rows - rows], f"{max_rows} rows (--max-rows)"
        if batch:
            if fmt is OutputFormat.csv:
                cells = batch if plain else [[v if type(v) in _AS_IS else _csv_cell(v) for v in r] for r in batch]
                write(csv_chunk(cells))
            else:
                write(("\n" if rows == 0 else ",\n") + json_chunk(batch))
            rows += len(batch)
        if stopped is None and max_bytes is not None and written >= max_bytes:
            stopped = f"{written} bytes (--max-bytes {max_bytes})"
        if stopped:
            break
    if fmt is OutputFormat.json:
        write("\n]\n" if rows else "]\n")
    out.flush()
    if stopped:
        raise OutputLimit(
            f"stopped after {stopped}: the output holds the first {rows} rows; narrow the query (WHERE, LIMIT, "
            "GROUP BY) or raise the limit (0: none)"
        )
    return rows
