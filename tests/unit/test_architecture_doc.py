"""ARCHITECTURE.md stays a map that can be read in ten minutes and that points at what exists:

- at most MAX_LINES lines, and no table cell longer than two lines of a rendered column (MAX_CELL characters);
- every file path it names exists (at the repository root, or under ts_core/, as the page says), every
  folder it names in `code` exists, and every `file.py:name` (or `file.py:Class.method`) names a
  definition in that file: a function, a class, a method or a module-level assignment;
- its layers, in order, are the layers of tests/unit/test_layers.py, which checks the rule on the source.

A file renamed or a function moved must take the page along, as a moved page must take its links
(tests/unit/test_doc_links.py). Names with a placeholder (`stage_<name>.py`, `iteration=k`) are patterns,
not paths, and are not looked up."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.unit.test_layers import LAYERS

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "ARCHITECTURE.md"
MAX_LINES = 150
# A rendered table column is ~60 characters wide on a laptop screen; two lines of it.
MAX_CELL = 120
# a file with its folders and an optional `:name`; not part of a longer token (a URL, a placeholder)
FILE = re.compile(
    r"(?<![\w/.<>=$-])((?:[A-Za-z_][\w.-]*/)*[A-Za-z_][\w-]*\.(?:py|md|yaml|toml))(?::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?(?![\w<>=/])"
)
FOLDER = re.compile(r"`([A-Za-z_][\w.-]*(?:/[A-Za-z_][\w.-]*)*/)`")
LAYER = re.compile(r"^- \*\*(\w+)\*\*")


def resolve(path: str) -> Path | None:
    """The file or folder a path on the page names: at the repository root, or under ts_core/."""
    for base in (REPO, REPO / "ts_core"):
        if (base / path).exists():
            return base / path
    return None


def defines(source: str, name: str) -> bool:
    """Whether `name` (or `Class.method`) is defined at the top of the module `source`."""
    scope: list[ast.stmt] = ast.parse(source).body
    *outer, last = name.split(".")
    for part in outer:
        cls = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == part]
        if not cls:
            return False
        scope = cls[0].body
    for node in scope:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == last:
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == last for t in targets):
            return True
    return False


def missing_references(text: str) -> list[str]:
    """'line: what' for each path that does not exist and each `file.py:name` not defined there."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in FILE.finditer(line):
            path, name = match.group(1), match.group(2)
            found = resolve(path)
            if found is None:
                out.append(f"{number}: {path} does not exist")
            elif name and path.endswith(".py") and not defines(found.read_text(encoding="utf-8"), name):
                out.append(f"{number}: {path} defines no {name}")
        for match in FOLDER.finditer(line):
            if resolve(match.group(1)) is None:
                out.append(f"{number}: folder {match.group(1)} does not exist")
    return out


def long_cells(text: str) -> list[str]:
    """'line: cell' for each table cell longer than MAX_CELL characters (escaped pipes stay in their cell)."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
            out += [f"{number}: {c.strip()[:60]}..." for c in cells if len(c.strip()) > MAX_CELL]
    return out


def test_the_checks_see_what_they_look_for():
    good = "See pipeline/loop.py:train, store/manifest.py, `ts_core/algo/` and engine/rollout.py:HFEngine.generate."
    assert missing_references(good) == []
    bad = "pipeline/loop.py:no_such_fn, nowhere/gone.py, `no_folder/`, a pattern `pipeline/stage_<name>.py`"
    assert missing_references(bad) == [
        "1: pipeline/loop.py defines no no_such_fn",
        "1: nowhere/gone.py does not exist",
        "1: folder no_folder/ does not exist",
    ]
    assert long_cells("| a | " + "x" * (MAX_CELL + 1) + " |\n| b \\| c | d |") == [f"1: {'x' * 60}..."]


def test_every_path_and_name_on_the_page_exists():
    missing = missing_references(PAGE.read_text(encoding="utf-8"))
    assert not missing, "ARCHITECTURE.md names what does not exist (fix the page or the name):\n" + "\n".join(missing)


def test_the_page_reads_in_ten_minutes():
    text = PAGE.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, (
        f"ARCHITECTURE.md has {len(text.splitlines())} lines (at most {MAX_LINES})"
    )
    assert not long_cells(text), "table cells over two lines:\n" + "\n".join(long_cells(text))


def test_its_layers_are_the_layer_rule():
    section = PAGE.read_text(encoding="utf-8").split("## Layers", 1)[1].split("\n## ", 1)[0]
    named = [m.group(1) for line in section.splitlines() if (m := LAYER.match(line))]
    assert named == LAYERS, f"ARCHITECTURE.md's layers {named} are not tests/unit/test_layers.py's {LAYERS}"
