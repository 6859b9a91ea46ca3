"""Test hook (not collected): block one `os.rename`/`os.replace` in whichever process does it.

The resume driver (tests/helpers/resume_driver.py) pauses a stage at the atomic rename that would
publish its output. With `update.launcher=accelerate` that rename happens in the trainer's
processes, not the driver's, so the driver puts this folder first on PYTHONPATH and names the pause
in TS_TEST_PAUSE_AT ("os-function|target|marker"): every Python process it starts imports this file
at start-up (`sitecustomize`) and blocks there too. ts_core has no such hook.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def pause_at_rename(fn_name: str, target: Path, marker: Path) -> None:
    """Make os.<fn_name>(src, dst) block forever when dst is `target` (after writing `marker`), once:
    with `marker` there, the rename goes through (a rerun started with the same environment, as a
    deployment's worker starts every flow run, resumes)."""
    orig = getattr(os, fn_name)
    target = Path(target).resolve()

    def hooked(src, dst, *args, **kwargs):
        if Path(dst).resolve() == target and not Path(marker).exists():
            Path(marker).write_text(f"{os.getpid()} {src} -> {dst}\n")
            while True:
                time.sleep(60)
        return orig(src, dst, *args, **kwargs)

    setattr(os, fn_name, hooked)


def install_from_env() -> None:
    spec = os.environ.get("TS_TEST_PAUSE_AT")
    if spec:
        fn_name, target, marker = spec.split("|")
        pause_at_rename(fn_name, Path(target), Path(marker))


install_from_env()
