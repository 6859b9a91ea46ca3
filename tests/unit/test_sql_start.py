"""`ts sql` starts without torch or pydantic: its views and output need DuckDB and pyarrow only.
Importing torch (through the report's population names, which format the table's cells) took ~0.3 s of
the start of every query printed as a table; typer 0.29 coerces every option through a pydantic
TypeAdapter built at each start (~0.1 s: pyproject.toml holds typer below it)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import sys
sys.argv = ["ts", "sql", "select 1 AS one"]  # the table a user sees (its cells are formatted)
from thinking_seeds.flows.cli import main
try:
    main()
except SystemExit as e:
    assert not e.code, e.code
print("torch" in sys.modules, "pydantic" in sys.modules)
"""


def test_ts_sql_imports_neither_torch_nor_pydantic(tmp_path):
    env = dict(os.environ, TS_RUNS_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert "one" in out.stdout and any(" 1 " in ln for ln in lines), out.stdout  # the query's table
    torch, pydantic = lines[-1].split()
    assert torch == "False", "ts sql imported torch"
    assert pydantic == "False", "ts sql imported pydantic (typer >= 0.29 does: pyproject.toml holds it below)"
