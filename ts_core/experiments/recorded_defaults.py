"""A default that changed after a comparison recorded a run keeps its old value for that run.

    specs = with_recorded_defaults(spec.runs(), runs_dir, spec.report_dir)   # compare.prepare
    specs[0].kept        # ("update.max_tokens_per_micro_batch=null",) for a run recorded before the change

When a config default changes after runs existed (config/run_config.py DEFAULTS_BEFORE), `ts train`
on a run started before keeps the run's value (pipeline/resume.py). A comparison, though, plans every
run's config afresh from its preset and overrides, so with today's default its committed archives
would no longer restore (their config hashes differ), a --reference run would not be complete, and a
registered protocol would no longer hash as registered. Wherever a comparison plans a run's config it
therefore looks for its record of that run, the first of:

    the run's config.yaml under the runs folder     a run trained here, or a copy restored from the archive
    its archived config.yaml                        OUT/ID/runs/<run_id>/config.yaml
    its registered protocol                         OUT/ID/protocol.json: the resolved config of the run's
                                                    variant, or the run's registered config hash (an SFT
                                                    control's config is registered only as a hash)

and takes each DEFAULTS_BEFORE key at its old value where that record holds the old value or lacks
the key (a hash: where the old values make the planned config hash as registered), unless the
comparison's own overrides name the key. Those values are the run's `kept` overrides
(RunSpec.kept, control_config's `kept`): its job gets them as `--set` (`--keep` for an SFT control),
so the run trains with the config the plan hashed, while its marker and the protocol's hashed
overrides stay as they were written. A comparison without a record of a run (a new one) uses
today's default, and a run's record, once it exists, holds the value it was given: the rule gives the
same answer at every later invocation.

Reads files, starts nothing; never imports prefect.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from thinking_seeds.config import RunConfig, load_config
from thinking_seeds.config.run_config import DEFAULTS_BEFORE, defaults_before_held
from thinking_seeds.experiments.run_spec import PROTOCOL_FILE, RunSpec
from thinking_seeds.yaml_limits import YamlLimitError, read_bounded

__all__ = ["Record", "RunRecords", "kept_defaults", "with_recorded_defaults"]

# A comparison's record of one run: a config as a dict, or the config hash its protocol registered.
Record = dict[str, Any] | str


def _read_config(path: Path) -> dict[str, Any] | None:
    """A config.yaml as a dict; None when absent or unreadable (the run's own start names the damage)."""
    if not path.is_file():
        return None
    try:
        data = read_bounded(path)
    except (OSError, YamlLimitError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def _read_protocol(report_dir: Path | None) -> dict[str, Any] | None:
    if report_dir is None:
        return None
    try:
        data = json.loads((Path(report_dir) / PROTOCOL_FILE).read_text())
    except (OSError, ValueError):  # absent; a damaged one is refused by protocol.register itself
        return None
    return data if isinstance(data, dict) else None


class RunRecords:
    """What a comparison has recorded of its runs: under `runs_dir` (None: not looked at) and in its
    report folder `report_dir` (archive and protocol; None: not looked at). The protocol is read once."""

    def __init__(self, runs_dir: Path | None, report_dir: Path | None) -> None:
        self.runs_dir = None if runs_dir is None else Path(runs_dir)
        self.report_dir = None if report_dir is None else Path(report_dir)
        self.protocol = _read_protocol(self.report_dir)

    def of(self, run_id: str, variant: str | None = None) -> Record | None:
        """The first record of `run_id` (see the module doc); `variant` finds its protocol config."""
        places = []
        if self.runs_dir is not None:
            places.append(self.runs_dir / run_id / "config.yaml")
        if self.report_dir is not None:
            places.append(self.report_dir / "runs" / run_id / "config.yaml")
        for path in places:
            found = _read_config(path)
            if found is not None:
                return found
        return self._registered(run_id, variant)

    def kept(self, run_id: str, preset: str, overrides: Sequence[str], variant: str | None = None) -> tuple[str, ...]:
        """The `kept` overrides of the run planned as `preset` + `overrides` (kept_defaults of its record)."""
        record = self.of(run_id, variant)
        return () if record is None else kept_defaults(load_config(preset, list(overrides)), overrides, record)

    def _registered(self, run_id: str, variant: str | None) -> Record | None:
        if not self.protocol:
            return None
        configs = self.protocol.get("configs") or {}
        if variant is not None and isinstance(configs.get(variant), dict):
            return configs[variant]
        hashed = self.protocol.get("protocol") or {}
        for entry in (hashed.get("methods") or {}).values():
            run = (entry.get("runs") or {}).get(run_id)
            if isinstance(run, dict) and isinstance(run.get("config_hash"), str):
                return run["config_hash"]
        control = (hashed.get("control") or {}).get("runs") or {}
        return control.get(run_id) if isinstance(control.get(run_id), str) else None


def _with_old(cfg: RunConfig, keys: Sequence[tuple[str, str]]) -> RunConfig:
    for section, key in keys:
        moved = getattr(cfg, section).model_copy(update={key: DEFAULTS_BEFORE[(section, key)]})
        cfg = cfg.model_copy(update={section: moved})
    return cfg


def kept_defaults(planned: RunConfig, overrides: Sequence[str], record: Record | None) -> tuple[str, ...]:
    """The `section.key=old` overrides that give `planned` (the run's config from its preset and
    `overrides`) the old value of each DEFAULTS_BEFORE key its `record` holds; () without a record.

    A key the run's overrides set is the comparison's own choice and is never kept."""
    if record is None:
        return ()
    named = {o.split("=", 1)[0].strip() for o in overrides}
    candidates = [
        (section, key)
        for (section, key), old in DEFAULTS_BEFORE.items()
        if f"{section}.{key}" not in named and getattr(getattr(planned, section), key) != old
    ]
    if not candidates:
        return ()
    if isinstance(record, str):  # a registered hash: the old values (fewest first) that make it
        if planned.config_hash() == record:
            return ()
        subsets = (c for n in range(1, len(candidates) + 1) for c in itertools.combinations(candidates, n))
        keys = next((c for c in subsets if _with_old(planned, c).config_hash() == record), ())
    else:
        held = set(defaults_before_held(record))
        keys = tuple(c for c in candidates if c in held)
    return tuple(f"{section}.{key}={json.dumps(DEFAULTS_BEFORE[(section, key)])}" for section, key in keys)


def with_recorded_defaults(
    specs: Sequence[RunSpec], runs_dir: Path | None, report_dir: Path | None, records: RunRecords | None = None
) -> list[RunSpec]:
    """`specs` with each run's `kept` overrides from the comparison's records (module doc)."""
    records = records or RunRecords(runs_dir, report_dir)
    return [replace(s, kept=records.kept(s.run_id, s.preset, s.overrides, s.variant)) for s in specs]
