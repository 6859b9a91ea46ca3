"""The tiny run the tests train: its overrides, the random model it trains, and a copy of a finished run.

A run of a few seconds on a random-weights ~20k-parameter Llama with the chain_sum character
tokenizer (rewards are ~0 with it: use it for plumbing, not learning). MOVING adds an entropy
bonus and a larger learning rate, so the weights move although every advantage is zero and
"the same final weights" is a real check.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# A run of a few seconds on the random tiny model (add model.path=...).
TINY_OVERRIDES = [
    "iterations=2",
    "rollout.prompts_per_iteration=4",
    "data.train_size=50",
    "data.val_size=8",
    "data.test_size=8",
    "eval.prompts=4",
    "eval.samples=4",
    "pool.snapshot_every=1",
    # In process: a run of seconds would pay a second interpreter's start (the default, accelerate, is
    # tested where it is the subject: e2e/test_persistent_trainer.py, test_update_processes.py, the wheel).
    "update.launcher=in_process",
]
MOVING = ["loss.entropy_coeff=0.01", "update.lr=1e-3"]
# The run id of the shared trained run (the `tiny_run` fixture); a run's rows carry its id, so a
# test comparing with that run trains under the same id.
TINY_RUN_ID = "tiny"


def build_tiny_model(path: Path) -> Path:
    """The random tiny Llama and its character tokenizer, saved at `path` (seeded: always the same)."""
    import torch

    from thinking_seeds.data.chain_sum import CHARSET
    from thinking_seeds.engine.models import char_tokenizer, tiny_llama

    tok = char_tokenizer(CHARSET)
    torch.manual_seed(0)
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=2, heads=2, intermediate=64)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def copy_tree(src: Path, dst: Path) -> Path:
    """Copy a run directory as it is: files with several names inside it (a pool snapshot is a hard
    link to its policy checkpoint) keep one inode in the copy, symlinks stay symlinks, mtimes are kept."""
    first: dict[tuple[int, int], Path] = {}
    for dirpath, dirnames, filenames in os.walk(src):  # symlinked folders are listed, not entered
        here = Path(dirpath)
        out = dst / here.relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        for name in [*filenames, *(n for n in dirnames if (here / n).is_symlink())]:
            s, d = here / name, out / name
            st = s.lstat()
            if s.is_symlink():
                d.symlink_to(os.readlink(s))
            elif st.st_nlink > 1 and (st.st_dev, st.st_ino) in first:
                os.link(first[(st.st_dev, st.st_ino)], d)
            else:
                shutil.copy2(s, d)
                first[(st.st_dev, st.st_ino)] = d
    return dst


def copy_run(run, base: Path):
    """A copy of RunDir `run` under `base`, with the same run id (its rows name it)."""
    from thinking_seeds.store.run_dir import RunDir

    return RunDir(copy_tree(run.root, base / run.run_id))
