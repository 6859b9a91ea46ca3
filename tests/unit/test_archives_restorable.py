"""Every committed comparison archive (docs/results/<id>/runs/) is restorable: the config its
compare.json records (preset + overrides) still hashes to the hash the run finished with.

`ts compare` restores an archived run only when the config hash matches (experiments/archive.py);
a change of a config default or of a preset would otherwise silently retrain a committed comparison
from scratch on the next `ts compare` (hours), instead of rebuilding its report from the archive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thinking_seeds.config import load_config

ROOT = Path(__file__).resolve().parents[2]
ARCHIVED = sorted(p.parent for p in ROOT.glob("docs/results/*/runs/*/archive.json"))


@pytest.mark.skipif(not ARCHIVED, reason="no committed archive in this checkout")
def test_committed_archives_still_hash_to_their_configs():
    stale = []
    for run in ARCHIVED:
        marker = json.loads((run / "compare.json").read_text())
        want = json.loads((run / "archive.json").read_text())["config_hash"]
        got = load_config(marker["preset"], marker["overrides"]).config_hash()
        if got != want:
            stale.append(f"{run.relative_to(ROOT)}: {got} != {want}")
    assert not stale, "configs no longer hash as archived (a default or preset changed?):\n" + "\n".join(stale)
