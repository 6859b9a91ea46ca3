"""Test helper (not collected): train a run in this process, optionally stopping dead at a stage.

    python tests/helpers/resume_driver.py {loop|flow} RUN_ID [--pause-at STAGE:K --marker FILE] [--set KEY=VALUE]...

`loop` runs `thinking_seeds.pipeline.loop.train`, `flow` runs the Prefect `train_flow` (tasks in this process).
`--pause-at seeds:K` blocks the seeds stage of iteration K at the atomic rename of its prefixes
file (the temp file is complete, the final name not yet there); `--pause-at update:K` blocks the
update at the rename of θ_{K+1}'s checkpoint directory (in the driver, or in the trainer process it
launched: pause_hook/sitecustomize.py). The blocked process then writes FILE and sleeps, so the test
can SIGKILL the driver's process group mid-stage. The hook lives only here, in test code: ts_core has none.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


HOOK_DIR = Path(__file__).resolve().parent / "pause_hook"


def pause_at_rename(fn_name: str, target: Path, marker: Path) -> None:
    """Make os.<fn_name>(src, dst) block forever when dst is `target` (after writing `marker`), in
    this process and in every Python process it starts (pause_hook/sitecustomize.py): the update's
    rename happens in the trainer's process under the accelerate launchers."""
    os.environ["TS_TEST_PAUSE_AT"] = f"{fn_name}|{target}|{marker}"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOK_DIR), os.environ.get("PYTHONPATH")) if p)
    import importlib.util

    spec = importlib.util.spec_from_file_location("ts_pause_hook", HOOK_DIR / "sitecustomize.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # installs the hook here


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["loop", "flow"])
    ap.add_argument("run_id")
    ap.add_argument("--pause-at", default=None, help="seeds:K or update:K")
    ap.add_argument("--marker", type=Path, default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    a = ap.parse_args()
    if not {"cluster=ray", "cluster.kind=ray"} & set(a.overrides):
        # cluster=local needs no Ray (issue #14 item 1): here a local run could not even import it
        sys.modules["ray"] = None

    from thinking_seeds.config import load_config
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run(a.run_id)
    if a.pause_at:
        stage, k = a.pause_at.split(":")
        k = int(k)
        if stage == "seeds":
            pause_at_rename("replace", run.prefixes(k), a.marker)  # write_table_atomic's os.replace
        elif stage == "update":
            pause_at_rename("rename", run.policy(k + 1), a.marker)  # save_checkpoint's os.rename
        else:
            raise SystemExit(f"--pause-at: unsupported stage {stage!r}")

    if a.mode == "loop":
        from thinking_seeds.pipeline.loop import train

        train(run, load_config("tiny", a.overrides))
    else:
        from thinking_seeds.flows.train import train_flow

        train_flow(preset="tiny", run_id=a.run_id, overrides=a.overrides)
    print("DONE", run.root)


if __name__ == "__main__":
    main()
