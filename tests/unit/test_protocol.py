"""The comparison's pre-registered protocol (protocol.py) and the symmetric validation selection
(selection.py), on planned runs and hand-made results: no training."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thinking_seeds.config import ConfigError
from thinking_seeds.experiments.compare import run_selection, train_jobs
from thinking_seeds.experiments.protocol import protocol_lines, protocol_of, register
from thinking_seeds.experiments.selection import (
    SELECT_STAGE,
    choose,
    selection_specs,
    selection_table,
    validation_jobs,
    with_selection,
)
from thinking_seeds.experiments.spec import ComparisonSpec


def _spec(tmp_path, **kw):
    fields = {"compare_id": "pp", "methods": "grpo,thinking_seeds", "seeds": "0,1", "out_dir": tmp_path / "out"}
    fields["overrides"] = ["iterations=2"]
    return ComparisonSpec.of(**(fields | kw))


def test_protocol_is_written_before_the_first_run_and_a_change_is_refused(tmp_path):
    runs = tmp_path / "runs"
    spec = _spec(tmp_path)
    rec = register(spec, spec.runs(), runs, now="2026-12-02T06:00:00+00:00")
    saved = json.loads((spec.report_dir / "protocol.json").read_text())
    assert saved["hash"] == rec["hash"] and saved["runs_started_before_registration"] == []
    p = saved["protocol"]
    assert (
        p["primary_endpoint"]["pair"] == ["thinking_seeds", "grpo"]
        and p["primary_endpoint"]["metric"] == "test/accuracy"
    )
    assert sorted(p["methods"]) == ["grpo", "thinking_seeds"]
    assert [r["seed"] for r in p["methods"]["grpo"]["runs"].values()] == [0, 1]
    assert saved["configs"]["thinking_seeds"]["update"]["lr"] == 1e-4  # the resolved config per method
    assert "before the first run started" in (spec.report_dir / "protocol.md").read_text()
    # The same plan again: nothing changes.
    assert register(spec, spec.runs(), runs, now="2026-12-02T07:00:00+00:00")["registered_at"].startswith(
        "2026-12-02T06"
    )

    # A run starts, then the plan changes: refused, naming what changed.
    (runs / "pp-grpo-s0").mkdir(parents=True)
    (runs / "pp-grpo-s0" / "config.yaml").write_text("{}")
    changed = _spec(tmp_path, overrides=["iterations=2", "update.lr=3e-4"])
    with pytest.raises(
        ConfigError, match=r"registers protocol .*configs\.grpo\.update\.lr: 0\.0001 -> 0\.0003.*--amend-protocol"
    ):
        register(changed, changed.runs(), runs)
    assert json.loads((spec.report_dir / "protocol.json").read_text())["hash"] == rec["hash"]  # untouched

    amended = _spec(tmp_path, overrides=["iterations=2", "update.lr=3e-4"], amend_protocol=True)
    rec2 = register(amended, amended.runs(), runs, now="2026-12-02T08:00:00+00:00")
    assert rec2["hash"] != rec["hash"] and rec2["registered_at"] == rec["registered_at"]
    (am,) = rec2["amendments"]
    assert am["from_hash"] == rec["hash"] and am["runs_started_before"] == ["pp-grpo-s0"]
    assert any("update.lr" in c for c in am["changes"])
    text = "\n".join(protocol_lines(rec2))
    assert "the protocol changed after the first run started" in text and "update.lr" in text
    assert "were not registered" in protocol_lines(None)[0]


def test_protocol_names_the_primary_pair_and_refuses_a_pair_not_compared(tmp_path):
    spec = _spec(tmp_path, methods="grpo,seq_mix,thinking_seeds", primary="seq_mix-grpo")
    rec = register(spec, spec.runs(), tmp_path / "runs")
    assert rec["protocol"]["primary_endpoint"]["pair"] == ["seq_mix", "grpo"]
    with pytest.raises(ConfigError, match="luffy is not among the compared methods"):
        _spec(tmp_path, primary="luffy-grpo")
    assert _spec(tmp_path, methods="grpo,seq_mix").primary_pair is None  # no TS: no default pair


def test_the_registered_reading_is_in_the_protocols_hash_and_the_default_leaves_old_hashes_alone(tmp_path):
    plain = _spec(tmp_path)
    equal = _spec(tmp_path, reading="equal_iterations")
    a, b = protocol_of(plain, plain.runs()), protocol_of(equal, equal.runs())
    assert "reading" not in a["protocol"]  # a protocol registered before the option hashes as it did
    assert b["protocol"]["reading"] == "equal_iterations" and a["hash"] != b["hash"]
    assert b["protocol"]["primary_endpoint"]["what"].endswith("its checkpoint at the other arm's count)")
    runs = tmp_path / "runs"
    register(plain, plain.runs(), runs)
    (runs / "pp-grpo-s0").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"reading.*--amend-protocol"):
        register(equal, equal.runs(), runs)  # changing the reading after a run started is an amendment
    rec = register(_spec(tmp_path, reading="equal_iterations", amend_protocol=True), equal.runs(), runs)
    assert "every row read at equal iterations" in "\n".join(protocol_lines(rec))
    with pytest.raises(ConfigError, match="--reading final: one of compute_matched, equal_iterations"):
        _spec(tmp_path, reading="final")


def _write_validation(runs, spec, acc):
    """The metrics file a selection run's validation evaluation writes, with pass@1 `acc`."""
    f = runs / spec.run_id / "metrics" / f"iteration={spec.config().iterations}" / f"{SELECT_STAGE}.parquet"
    f.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"name": "eval/accuracy", "value": acc}, {"name": "eval/pass@32", "value": min(1.0, 2 * acc)}]
    pq.write_table(pa.Table.from_pylist(rows), f)


def test_selection_is_symmetric_reads_validation_only_and_lands_in_the_protocol(tmp_path):
    runs = tmp_path / "runs"
    spec = _spec(tmp_path, methods="grpo:0-4,thinking_seeds:0-4", select=["lr=1e-4,3e-4,1e-3"], select_seeds="0-2")
    sel = selection_specs(spec)
    # every method trains the whole grid on the selection seeds (their own seed ranges do not apply)
    assert len(sel) == 2 * 3 * 3 and {s.compare_id for s in sel} == {"pp-select"}
    assert {(s.method, s.sweep, s.seed) for s in sel} >= {("grpo", (("update.lr", "1e-3"),), 2)}
    # never the test split: no --final-test in training, the extra evaluation is on validation
    for job in train_jobs(sel, runs, final_test=False):
        assert not any("final-test" in a for a in job.cmd)
    for job in validation_jobs(sel, runs):
        assert job.cmd[job.cmd.index("--split") + 1] == "validation" and "test" not in job.cmd
        assert int(job.cmd[job.cmd.index("--samples") + 1]) >= 32 and "--all-prompts" in job.cmd

    # Made-up validation scores: grpo peaks at 3e-4, thinking_seeds at 1e-3 (mean over 3 seeds).
    best = {"grpo": "3e-4", "thinking_seeds": "1e-3"}
    for s in sel:
        ((_, v),) = s.sweep
        _write_validation(runs, s, 0.50 + (0.05 if v == best[s.method] else 0.0) + 0.01 * s.seed)
    table = selection_table(sel, runs)
    assert table["grpo"]["3e-4"] == pytest.approx({0: 0.55, 1: 0.56, 2: 0.57})
    chosen = choose(table, ["1e-4", "3e-4", "1e-3"])
    assert chosen == best

    spec2, record = run_selection(spec, runs, train=False)  # reads the evaluated runs, trains nothing
    assert record["chosen"] == best and record["split"] == "validation" and record["prompts"] >= 128
    lrs = {(s.method, s.config().update.lr) for s in spec2.runs()}
    assert lrs == {("grpo", 3e-4), ("thinking_seeds", 1e-3)}
    assert {s.run_id for s in spec2.runs()} == {s.run_id for s in spec.runs()}  # the choice is not in the id
    rec = register(spec2, spec2.runs(), runs, record)
    assert rec["protocol"]["selection"]["chosen"] == best
    text = "\n".join(protocol_lines(rec))
    assert "Selected on validation" in text
    # every score is shown, the choice in bold; only thinking_seeds' choice (1e-3) is on the grid's edge
    assert "| grpo | 0.510 (0.500 / 0.510 / 0.520) | **0.560 (0.550 / 0.560 / 0.570)** | 0.510" in text
    assert "grid's edge for thinking_seeds:" in text
    # a second resolution from the protocol gives the same spec (idempotent: no duplicated override)
    again, _ = run_selection(with_selection(spec2, best), runs, train=False)
    assert again.method_overrides == {"grpo": ["update.lr=3e-4"], "thinking_seeds": ["update.lr=1e-3"]}


def test_choose_breaks_exact_ties_by_grid_order_and_refuses_uneven_seeds():
    table = {"grpo": {"1e-4": {0: 0.5, 1: 0.6}, "3e-4": {0: 0.6, 1: 0.5}}}
    assert choose(table, ["1e-4", "3e-4"]) == {"grpo": "1e-4"}
    assert choose(table, ["3e-4", "1e-4"]) == {"grpo": "3e-4"}
    with pytest.raises(ConfigError, match="different seeds"):
        choose({"grpo": {"1e-4": {0: 0.5, 1: 0.6}, "3e-4": {0: 0.9}}}, ["1e-4", "3e-4"])


def test_selection_arguments_are_checked():
    with pytest.raises(ConfigError, match="two or more values"):
        ComparisonSpec.of(select=["lr=1e-4"])
    with pytest.raises(ConfigError, match="budget key"):
        ComparisonSpec.of(select=["iterations=10,20"])
    with pytest.raises(ConfigError, match="drop the --set"):
        ComparisonSpec.of(select=["lr=1e-4,3e-4"], overrides=["update.lr=1e-4"])
    with pytest.raises(ConfigError, match="--select and --sweep"):
        ComparisonSpec.of(select=["lr=1e-4,3e-4"], sweep=["pool.size=1,4"])


def test_a_registered_selection_is_reused_not_retrained(tmp_path, monkeypatch):
    """A fresh clone has the protocol (and the archive), not the selection's run folders: the same
    command must take the registered choice instead of training the grid again."""
    import thinking_seeds.experiments.compare as compare

    runs = tmp_path / "runs"
    spec = _spec(tmp_path, select=["lr=1e-4,3e-4"], select_seeds="0")
    for s in selection_specs(spec):
        ((_, v),) = s.sweep
        _write_validation(runs, s, 0.6 if v == "3e-4" else 0.5)
    spec2, record = run_selection(spec, runs, train=False)
    register(spec2, spec2.runs(), runs, record)

    def no_training(*args, **kwargs):
        raise AssertionError("the registered selection was trained again")

    monkeypatch.setattr(compare, "run_all", no_training)
    again, rec = run_selection(spec, tmp_path / "fresh-clone-runs", train=True)
    assert rec["chosen"] == {"grpo": "3e-4", "thinking_seeds": "3e-4"}
    assert {s.config().update.lr for s in again.runs()} == {3e-4}


def test_a_comparison_whose_every_run_began_before_any_protocol_stays_unregistered(tmp_path):
    """An archive from before protocols existed, rebuilt in a fresh clone: registering it now would
    pre-register nothing, and its report would name a primary endpoint it never had."""
    runs = tmp_path / "runs"
    spec = _spec(tmp_path)
    for s in spec.runs():
        (runs / s.run_id).mkdir(parents=True)
        (runs / s.run_id / "config.yaml").write_text("{}")
    assert register(spec, spec.runs(), runs) is None
    assert not (spec.report_dir / "protocol.json").exists()
    assert "No protocol.json" in protocol_lines(None)[0]
    # One run still to start: registered, naming the runs that had started.
    more = _spec(tmp_path, seeds="0,1,2")
    rec = register(more, more.runs(), runs)
    assert sorted(rec["runs_started_before_registration"]) == sorted(s.run_id for s in spec.runs())
