"""Every committed comparison archive (docs/results/<id>/runs/) is restorable: the config its
compare.json records (preset + overrides) still hashes to the hash the run finished with, and every
registered protocol of an archived comparison (docs/results/<id>/protocol.json) still plans each run
at its registered config hash.

`ts compare` restores an archived run only when the config hash matches (experiments/archive.py),
and refuses a protocol that no longer hashes as registered (experiments/protocol.py); a change of a
config default or of a preset would otherwise silently retrain a committed comparison from scratch
on the next `ts compare` (hours), instead of rebuilding its report from the archive. The one change
allowed is a default listed in DEFAULTS_BEFORE (config/run_config.py): the comparison plans such a
key at the old value its record of the run holds (experiments/recorded_defaults.py), and so do these
checks, with the same function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from thinking_seeds.config import load_config
from thinking_seeds.experiments.recorded_defaults import kept_defaults

ROOT = Path(__file__).resolve().parents[2]
ARCHIVED = sorted(p.parent for p in ROOT.glob("docs/results/*/runs/*/archive.json"))
# Protocols of comparisons with an archive: what a clone's `ts compare` checks (a pilot without an
# archive, registered on an earlier base model, is not rerun from its protocol).
PROTOCOLS = sorted(p for p in ROOT.glob("docs/results/*/protocol.json") if any(p.parent.glob("runs/*/archive.json")))


def _planned_hash(preset: str, overrides: list[str], record: dict | str | None) -> str:
    """The config hash `ts compare` plans for a run of `preset` + `overrides` whose record is `record`."""
    kept = kept_defaults(load_config(preset, overrides), overrides, record)
    return load_config(preset, [*overrides, *kept]).config_hash()


@pytest.mark.skipif(not ARCHIVED, reason="no committed archive in this checkout")
def test_committed_archives_still_hash_to_their_configs():
    stale = []
    for run in ARCHIVED:
        marker = json.loads((run / "compare.json").read_text())
        want = json.loads((run / "archive.json").read_text())["config_hash"]
        record = yaml.safe_load((run / "config.yaml").read_text())
        got = _planned_hash(marker["preset"], marker["overrides"], record)
        if got != want:
            stale.append(f"{run.relative_to(ROOT)}: {got} != {want}")
    assert not stale, "configs no longer hash as archived (a default or preset changed?):\n" + "\n".join(stale)


@pytest.mark.skipif(not PROTOCOLS, reason="no committed protocol of an archived comparison in this checkout")
def test_registered_protocols_still_plan_their_config_hashes():
    stale = []
    for path in PROTOCOLS:
        record = json.loads(path.read_text())
        preset = record["protocol"]["preset"]
        for variant, entry in record["protocol"]["methods"].items():
            for run_id, run in entry["runs"].items():
                overrides = [*entry["overrides"], f"seed={run['seed']}"]  # as RunSpec.overrides orders them
                got = _planned_hash(preset, overrides, record["configs"].get(variant))
                if got != run["config_hash"]:
                    stale.append(f"{path.relative_to(ROOT)} {run_id}: {got} != {run['config_hash']}")
    assert not stale, "registered runs no longer plan as registered (a default or preset changed?):\n" + "\n".join(
        stale
    )
