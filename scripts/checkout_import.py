"""`thinking_seeds` importable from a checkout that is not installed (issue #52: the device check on a bare GPU
machine, where nothing can be installed from a registry).

The package exists only through pyproject.toml's `[tool.setuptools] package-dir` mapping (`thinking_seeds` is
ts_core/, `thinking_seeds.tasks` is tasks/, ...), so the repository root on `sys.path` does not make it
importable. `link_checkout(repo, into)` builds that mapping as a folder of symbolic links under `into`, read
from pyproject.toml itself (one source of truth): `into/thinking_seeds/` holds a link to every entry of
ts_core/, and a link named `tasks` to tasks/, and so on. The links point into the checkout, so what runs is the
checkout as it is now. Put `into` on `sys.path` and on `PYTHONPATH` (`use_checkout`), and every process the
check starts -- the trainer under `accelerate launch -m thinking_seeds.train.trainer_server` included --
imports the package the same way.

    python scripts/checkout_import.py DIR   # builds DIR/thinking_seeds and prints DIR (for a shell's PYTHONPATH)

Standard library only: it runs before anything the machine may lack.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """pyproject.toml's package-dir: dotted package name -> its folder in the checkout."""
    setup = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: repo / folder for name, folder in setup["package-dir"].items()}


def link_checkout(repo: Path, into: Path) -> Path:
    """The package-dir mapping as links under `into` (rebuilt from scratch each call); returns `into`."""
    mapping = package_dirs(repo)
    into.mkdir(parents=True, exist_ok=True)
    for top in {name.split(".")[0] for name in mapping}:
        shutil.rmtree(into / top, ignore_errors=True)
    # Parents before children: a package with mapped subpackages is a real folder of links to its own
    # entries, a package without any is one link to its folder.
    for name in sorted(mapping, key=lambda n: n.count(".")):
        target = into.joinpath(*name.split("."))
        has_children = any(other.startswith(name + ".") for other in mapping)
        if not has_children:
            target.symlink_to(mapping[name], target_is_directory=True)
            continue
        target.mkdir()
        for entry in mapping[name].iterdir():
            if entry.name != "__pycache__" and f"{name}.{entry.name}" not in mapping:
                (target / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return into


def use_checkout(repo: Path = REPO, into: Path | None = None) -> str:
    """Make `thinking_seeds` importable here and in every child process: installed already, nothing changes;
    else the links under `into` (default: a folder beside the temporary files) go first on sys.path and
    PYTHONPATH. Returns where the package comes from."""
    if importlib.util.find_spec("thinking_seeds") is not None:
        return "installed"
    into = into or Path(os.environ.get("TMPDIR", "/tmp")) / f"ts-checkout-{os.getuid()}"
    link_checkout(repo, into)
    sys.path.insert(0, str(into))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(into), os.environ.get("PYTHONPATH")) if p)
    importlib.invalidate_caches()
    return f"the checkout {repo}, linked under {into}"


if __name__ == "__main__":
    print(link_checkout(REPO, Path(sys.argv[1]).resolve()))
