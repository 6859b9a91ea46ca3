"""A default that changed after a comparison recorded its runs (config/run_config.py DEFAULTS_BEFORE)
keeps its old value for those runs (experiments/recorded_defaults.py): no training.

The regression this guards: update.max_tokens_per_micro_batch became 1024 in every preset, and
`ts compare` planned every run afresh, so archived runs were deleted instead of restored, a
--reference was "not complete" and a registered protocol was refused. Here a comparison is archived
and registered under a preset file as it was before such a change, then the same file is changed
the way the presets were, and the comparison is planned again with today's preset."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from thinking_seeds.config import load_config, save_config
from thinking_seeds.config.loading import PRESETS_DIR
from thinking_seeds.experiments import sft_control
from thinking_seeds.experiments.compare import prepare, train_jobs
from thinking_seeds.experiments.members import is_complete
from thinking_seeds.experiments.protocol import protocol_of, register
from thinking_seeds.experiments.recorded_defaults import kept_defaults, with_recorded_defaults
from thinking_seeds.experiments.sft_control import control_config, control_marker, control_run_id
from thinking_seeds.experiments.spec import ComparisonSpec

KEY = "update.max_tokens_per_micro_batch"
KEPT = f"{KEY}=null"


def _preset(path: Path, budget: str) -> Path:
    """The tiny preset with the update's token budget at `budget` ("null": as before the change)."""
    text = (PRESETS_DIR / "tiny.yaml").read_text()
    text, n = re.subn(r"max_tokens_per_micro_batch: (\d+|null)}", f"max_tokens_per_micro_batch: {budget}}}", text)
    assert n == 1
    path.write_text(text)
    return path


def _spec(preset: Path, out: Path, **kw) -> ComparisonSpec:
    fields = {"compare_id": "old", "methods": "grpo,thinking_seeds", "seeds": "0,1", "control_seeds": "0"}
    return ComparisonSpec.of(**({"preset": str(preset), "out_dir": out, "overrides": ["iterations=2"]} | fields | kw))


def _archive(root: Path, run_id: str, cfg, marker: dict) -> None:
    """An archived run as archive.archive_run leaves it, as far as restoring reads it."""
    d = root / run_id
    (d / "evals" / "final-test").mkdir(parents=True)
    save_config(cfg, d / "config.yaml")
    (d / "compare.json").write_text(json.dumps(marker | {"run_id": run_id}))
    (d / "archive.json").write_text(
        json.dumps({"run_id": run_id, "config_hash": cfg.config_hash(), "final_test": True})
    )


@pytest.fixture
def before(tmp_path):
    """A comparison registered and archived under the old default (2 methods x 2 seeds + 1 control),
    all but one run (grpo s1) and its control archived; then the preset gets the new default."""
    preset = _preset(tmp_path / "preset.yaml", "null")
    out, runs = tmp_path / "out", tmp_path / "runs"
    spec = _spec(preset, out)
    specs = spec.runs()
    registered = register(spec, specs, runs, now="2026-12-04T12:00:00+00:00")
    for s in specs:
        if s.run_id != "old-grpo-s1":
            _archive(spec.report_dir / "runs", s.run_id, s.config(), s.marker())
    assert specs[0].config().update.max_tokens_per_micro_batch is None
    _preset(preset, "1024")  # today's preset
    assert spec.runs()[0].config().update.max_tokens_per_micro_batch == 1024
    return spec, runs, registered


def test_archived_runs_restore_and_complete_with_todays_preset(before):
    spec, runs, _ = before
    specs = prepare(spec, runs)
    restored = sorted(p.parent.name for p in runs.glob("*/archive.json"))
    assert restored == ["old-grpo-s0", "old-thinking_seeds-s0", "old-thinking_seeds-s1"]  # none removed
    assert all(is_complete(s, runs) for s in specs if s.run_id != "old-grpo-s1")
    assert all(s.kept == (KEPT,) and s.config().update.max_tokens_per_micro_batch is None for s in specs)
    assert all(KEPT not in s.overrides and KEPT not in s.marker()["overrides"] for s in specs)  # marker as written


def test_registered_protocol_hashes_as_registered(before):
    spec, runs, registered = before
    specs = prepare(spec, runs)
    assert register(spec, specs, runs) == registered  # no refusal, nothing rewritten
    # Even with no run on disk: the protocol itself is the record (a fresh clone without an archive).
    again = with_recorded_defaults(spec.runs(), None, spec.report_dir)
    assert protocol_of(spec, again)["hash"] == registered["hash"]


def test_a_registered_run_not_started_trains_with_what_the_plan_hashed(before, monkeypatch):
    spec, runs, registered = before
    specs = prepare(spec, runs)
    job = next(j for j in train_jobs(specs, runs) if j.run_id == "old-grpo-s1")
    assert not job.done
    sets = [job.cmd[i + 1] for i, a in enumerate(job.cmd) if a == "--set"]
    assert sets[-1] == KEPT  # on this job's command line only
    want = registered["protocol"]["methods"]["grpo"]["runs"]["old-grpo-s1"]["config_hash"]
    assert load_config(str(spec.preset), sets).config_hash() == want  # what pipeline.loop will hash
    # The control, registered only as a hash: its job gets --keep and hashes as registered.
    rid = control_run_id("old", 0)
    ctrl_hash = registered["protocol"]["control"]["runs"][rid]
    jobs = []
    monkeypatch.setattr(sft_control, "run_jobs", lambda js, *a, **k: jobs.extend(js) or [])  # nothing starts
    # The control was never archived: its registered hash is its only record.
    sft_control.run_controls(specs, runs, budget_seconds=1.0, seeds=[0], report_dir=spec.report_dir)
    cmd = jobs[0].cmd
    keep = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--keep"]
    assert keep == [KEPT]
    base = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
    assert control_config(str(spec.preset), base, 0, keep).config_hash() == ctrl_hash
    assert (
        control_marker("old", str(spec.preset), base, 0)["overrides"]
        == json.loads((runs / rid / "compare.json").read_text())["overrides"]
    )  # the marker does not name the kept value


def test_a_reference_recorded_before_the_change_is_complete(before):
    spec, runs, _ = before
    prepare(spec, runs)
    ablation = _spec(
        Path(spec.preset),
        Path(spec.out_dir),
        compare_id="abl",
        methods="thinking_seeds",
        sweep=["prefix.ratio_max=0.4"],
        reference="old",
        control=False,
        control_seeds=None,
    )
    specs = prepare(ablation, runs)  # checks the reference's runs: complete, same budget
    assert all(s.kept == () and s.config().update.max_tokens_per_micro_batch == 1024 for s in specs)  # new runs


def test_a_new_comparison_uses_the_new_default(before):
    spec, runs, _ = before
    new = _spec(Path(spec.preset), Path(spec.out_dir), compare_id="new")
    specs = prepare(new, runs)
    assert all(s.kept == () and s.config().update.max_tokens_per_micro_batch == 1024 for s in specs)
    assert all(KEY not in " ".join(j.cmd) for j in train_jobs(specs, runs))


def test_kept_defaults_follows_the_record():
    planned = load_config("tiny", ["iterations=2"])
    assert planned.update.max_tokens_per_micro_batch == 1024
    old = load_config("tiny", ["iterations=2", KEPT])
    held = old.model_dump(mode="json")
    assert kept_defaults(planned, ["iterations=2"], held) == (KEPT,)
    lacking = {**held, "update": {k: v for k, v in held["update"].items() if k != "max_tokens_per_micro_batch"}}
    assert kept_defaults(planned, ["iterations=2"], lacking) == (KEPT,)  # written before the key existed
    assert kept_defaults(planned, ["iterations=2"], planned.model_dump(mode="json")) == ()  # a new run
    assert kept_defaults(planned, ["iterations=2"], None) == ()
    assert kept_defaults(planned, ["iterations=2"], old.config_hash()) == (KEPT,)  # a registered hash
    assert kept_defaults(planned, ["iterations=2"], planned.config_hash()) == ()
    assert kept_defaults(planned, ["iterations=2"], "0" * 16) == ()  # another config: not ours to fix
    own = load_config("tiny", ["iterations=2", f"{KEY}=2048"])
    assert kept_defaults(own, ["iterations=2", f"{KEY}=2048"], held) == ()  # the comparison sets it itself


def test_the_control_process_applies_keep_after_set(monkeypatch):
    """`python -m thinking_seeds.experiments.sft_control ... --keep K=V`: run_sft_control gets it as `kept`."""
    got = {}
    monkeypatch.setattr(sft_control, "run_sft_control", lambda *a, **k: got.update(k, args=a))
    sft_control.main(
        ["--compare-id", "c", "--seed", "0", "--budget-seconds", "1", "--set", "iterations=2"] + ["--keep", KEPT]
    )
    assert got["kept"] == [KEPT] and got["base_overrides"] == ["iterations=2"]
    cfg = control_config("tiny", got["base_overrides"], 0, got["kept"])
    assert (
        cfg.update.max_tokens_per_micro_batch is None
        and control_config("tiny", ["iterations=2"], 0).update.max_tokens_per_micro_batch == 1024
    )
