"""A committed comparison's report is what its archive gives: `ts compare`, run again with the command
quoted at the top of docs/results/<id>/report.md, restores every run from docs/results/<id>/runs/,
trains nothing, and writes the same report.md (but for the lines that name when and where it was
written) and the same results.parquet.

The results pages read these reports (docs/results/<id>.md), so a change of the report code that moves a
committed number shows up here, not on a reader's page. results.parquet is compared value by value, to
1e-12: the per-iteration means come from DuckDB's two-thread aggregation, whose summation order varies
between runs in the last bit (differences up to ~3e-17 seen), below every printed digit."""

from __future__ import annotations

import math
import re
import shlex
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from thinking_seeds.flows.cli import app

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"
# The comparisons whose committed report.md the current code writes again, byte for byte but the
# lines of when and where: every one the README's results table links. (The pilots' reports,
# game24-1step-pilot and game24-pilot2, were written by an older report and differ.)
COMMITTED = [
    "game24-1step-main",
    "game24-main",
    "game24-ablation-position",
    "countdown-plateau",
    "countdown-main",
    "countdown-credit",
    "countdown-same-seed",
]


def produced_by(report: Path) -> list[str]:
    """The `ts compare` arguments quoted at the top of a report, without its --out."""
    text = report.read_text(encoding="utf-8")
    command = re.search(r"^```\n(ts compare [^\n]+)\n```", text, re.MULTILINE).group(1)
    args = shlex.split(command)[1:]
    if "--out" in args:
        i = args.index("--out")
        del args[i : i + 2]
    return args


def same_text(md: str) -> str:
    """report.md without what differs between two writings from one archive: the command's --out, the
    time and runs folder it was generated from, and the line naming the archived runs."""
    md = re.sub(r"^ts compare [^\n]+$", "ts compare", md, flags=re.MULTILINE)
    md = re.sub(r"^Generated \S+ from `[^`]*`", "Generated from", md, flags=re.MULTILINE)
    return re.sub(r"\d+ of these runs come from the committed archive [^\n]*\n\n", "", md)


def test_same_text_drops_only_the_when_and_where():
    a = "```\nts compare --id x\n```\nGenerated 2026-12-05T08:17:30+00:00 from `/a/runs`: 30 runs.\n\nrow 1\n"
    b = (
        "```\nts compare --id x --out /tmp/o\n```\nGenerated 2026-12-06T20:15:06+00:00 from `/b/runs`: 30 runs.\n\n"
        "30 of these runs come from the committed archive `docs/results/x/runs` (...)\n\nrow 1\n"
    )
    assert same_text(a) == same_text(b)
    assert same_text(a) != same_text(b.replace("row 1", "row 2"))


@pytest.mark.parametrize("compare_id", COMMITTED)
def test_the_committed_report_is_what_its_archive_gives(compare_id, tmp_path):
    committed = RESULTS / compare_id
    args = produced_by(committed / "report.md")
    out, runs = tmp_path / "results", tmp_path / "runs"
    needed = [compare_id] + [args[i + 1] for i, a in enumerate(args) if a == "--reference"]
    for name in needed:
        shutil.copytree(RESULTS / name, out / name)
    result = CliRunner().invoke(
        app, [*args, "--out", str(out), "--runs-dir", str(runs)], env={"TS_RUNS_DIR": str(runs), "COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert not list(runs.glob("*/policy")), "a run trained: the archive did not restore it"
    assert (out / compare_id / "protocol.json").exists() == (committed / "protocol.json").exists()

    written = out / compare_id
    assert same_text((written / "report.md").read_text(encoding="utf-8")) == same_text(
        (committed / "report.md").read_text(encoding="utf-8")
    )
    old, new = pq.read_table(committed / "results.parquet"), pq.read_table(written / "results.parquet")
    assert old.column_names == new.column_names and old.num_rows == new.num_rows
    for name in old.column_names:
        for a, b in zip(old[name].to_pylist(), new[name].to_pylist(), strict=True):
            if isinstance(a, float) and isinstance(b, float):
                assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15) or (math.isnan(a) and math.isnan(b)), name
            else:
                assert a == b, name
