"""The project's code at another commit, runnable beside this checkout: the "before" side of a benchmark
that measures a change before and after in the same run.

`code_at(commit)` extracts ts_core, flows, tasks, data and bench with `git archive` (the repository is
only read) into a cache folder, plus a `sitecustomize.py` that points the editable install's package
mapping (`thinking_seeds` -> ts_core, ...) at that copy. `code_env(tree)` is the environment that runs
it: every Python process started with it -- the benchmark, and the trainer processes it launches --
imports the code at `commit` with this checkout's virtual environment.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINDER = "__editable___thinking_seeds_0_1_0_finder"  # written by `pip install -e .` (setuptools)


def code_at(commit: str, cache: Path) -> Path:
    """The project's code at `commit`, extracted once into `cache`/code-<commit> (the caller's folder: a
    benchmark's temporary one, or its --root, which it removes or keeps)."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", commit], check=True, capture_output=True, text=True
    ).stdout.strip()
    out = cache / f"code-{sha}"
    if not (out / "sc" / "sitecustomize.py").is_file():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", sha, "ts_core", "flows", "tasks", "data", "bench"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
        (out / "sc").mkdir(exist_ok=True)
        (out / "sc" / "sitecustomize.py").write_text(
            f"import {FINDER} as f\n"
            f"f.MAPPING.update({{k: v.replace({str(ROOT)!r}, {str(out)!r}, 1) for k, v in f.MAPPING.items()}})\n"
        )
    return out


def code_env(tree: Path) -> dict[str, str]:
    """os.environ, with the code in `tree` (code_at) imported by every Python process started with it."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tree / "sc"), os.environ.get("PYTHONPATH")])))
