"""The layer rule of ARCHITECTURE.md, checked on the source: a module imports only from its own layer or
the layers below it (imports inside functions count; `if TYPE_CHECKING:` blocks do not), and the
import graph between modules has no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

# Package folder of each part of the `thinking_seeds` namespace (pyproject's package-dir).
ROOTS = {
    "thinking_seeds": REPO / "ts_core",
    "thinking_seeds.assets": REPO / "data",
    "thinking_seeds.tasks": REPO / "tasks",
    "thinking_seeds.flows": REPO / "flows",
}
# Bottom to top. `config` (the typed run config) is the foundation every layer may read.
LAYERS = [
    "config",
    "algo",
    "store",
    "transports",
    "data",
    "engine",
    "evals",
    "train",
    "pipeline",
    "tasks",
    "experiments",
    "studies",
    "flows",
]


def modules() -> dict[str, Path]:
    """Every module of the namespace: dotted name -> file."""
    out = {}
    for pkg, root in ROOTS.items():
        for f in root.rglob("*.py"):
            rel = f.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = f
    return out


def layer_of(name: str) -> str:
    """The layer of a dotted module name inside the namespace ('thinking_seeds' itself: its __init__)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "config"


def imports_of(path: Path, name: str, is_pkg: bool) -> set[str]:
    """Modules of the namespace that `path` imports (absolute or relative), outside TYPE_CHECKING blocks."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([mod] if mod else []))
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)  # `from pkg import module`
    return {m for m in found if m.startswith("thinking_seeds")}


def graph() -> dict[str, set[str]]:
    mods = modules()
    g = {}
    for name, f in mods.items():
        deps = imports_of(f, name, f.name == "__init__.py")
        g[name] = {d for d in deps if d in mods and d != name}
    return g


def test_every_module_imports_only_its_layer_or_below():
    bad = []
    for name, deps in graph().items():
        for d in deps:
            if LAYERS.index(layer_of(d)) > LAYERS.index(layer_of(name)):
                bad.append(f"{name} ({layer_of(name)}) imports {d} ({layer_of(d)})")
    assert not bad, "layer rule broken (ARCHITECTURE.md):\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    g = graph()
    # A package's __init__ importing its own submodules is re-export, not a dependency cycle.
    for name in g:
        g[name] = {d for d in g[name] if not d.startswith(name + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for d in sorted(g.get(n, ())):
            if state.get(d) == 1:
                cycles.append(" -> ".join(path[path.index(d) :] + [d]) if d in path else f"{n} -> {d}")
            elif d not in state:
                visit(d, path + [d])
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n, [n])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_rule_sees_a_violation(tmp_path):
    """The checker itself: an upward import inside a function is caught."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from thinking_seeds.pipeline.loop import main\n")
    deps = imports_of(f, "thinking_seeds.algo.m", False)
    assert "thinking_seeds.pipeline.loop" in deps
    assert LAYERS.index(layer_of("thinking_seeds.pipeline.loop")) > LAYERS.index(layer_of("thinking_seeds.algo.m"))
