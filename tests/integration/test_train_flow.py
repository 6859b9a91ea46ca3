"""The Prefect training and evaluation flows on the random tiny model (in this process).

- a run completes, with a manifest per stage (the only record of what is done: no Prefect results), and artifacts;
- re-running with the same run id skips every stage: each task run ends in state "Skipped", nothing is rewritten;
- a deleted output is recomputed, and only what depends on it;
- a stage output that changed on disk invalidates everything downstream (Merkle chain of digests);
- evaluate_flow evaluates the latest (or a given) checkpoint and writes its metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from thinking_seeds.config import load_saved_config
from thinking_seeds.flows.evaluate import evaluate_flow
from thinking_seeds.flows.train import train_flow
from thinking_seeds.pipeline.graph import STAGES
from thinking_seeds.store.parquet_io import read_table, write_table_atomic
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import ROLLOUT_SCHEMA
from thinking_seeds.tasks.artifacts import artifact_key

RUN_ID = "flow_test"


def _mtimes(run: RunDir) -> dict[str, int]:
    return {
        str(p.relative_to(run.root)): p.stat().st_mtime_ns
        for p in sorted((run.root / "manifests").glob("iteration=*/*.json"))
    }


def _task_states(flow_state, n: int = 2 + 2 * len(STAGES)) -> dict[str, dict]:
    """Task run name -> its final state ({"type", "name", "message"}) in one flow run.

    The server records task run states from events, a moment after the flow returns: wait until
    `n` task runs (by default every stage's) are there in a final state.
    """
    import time

    from prefect.client.orchestration import get_client

    body = {"flow_runs": {"id": {"any_": [str(flow_state.state_details.flow_run_id)]}}, "limit": 200, "offset": 0}
    deadline = time.monotonic() + 60
    with get_client(sync_client=True) as client:
        while True:
            runs = client.request("POST", "/task_runs/filter", json=body).json()
            states = {r["name"]: r["state"] for r in runs}
            final = all(st and st["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") for st in states.values())
            if (len(states) >= n and final) or time.monotonic() > deadline:
                return states
            time.sleep(0.5)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_overrides):
    base = tmp_path_factory.mktemp("flow-runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("TS_RUNS_DIR", str(base))
    state = train_flow(preset="tiny", run_id=RUN_ID, overrides=tiny_overrides, return_state=True)
    yield SimpleNamespace(run=RunDir(Path(state.result())), overrides=tiny_overrides, base=base, state=state)
    mp.undo()


@pytest.fixture
def in_runs(trained, monkeypatch):
    monkeypatch.setenv("TS_RUNS_DIR", str(trained.base))
    return trained


def test_flow_writes_every_stage(trained):
    run = trained.run
    assert run.root.name == RUN_ID and run.read_manifest(0, "prepare") is not None
    for k in range(2):
        for stage in STAGES:
            assert run.read_manifest(k, stage) is not None, (k, stage)
    assert run.policy(2).is_dir() and run.rollouts(1).is_file()
    assert not (run.root / ".prefect-results").exists()  # the manifests are the only record of what is done
    # every stage's task run and no other: seeds 1 were sampled while update 0 ran (pipeline.overlap, on
    # by default on the CPU) in a thread of the flow, not a task run of their own (run_lifecycle.sampled_ahead)
    states = _task_states(trained.state)
    assert len(states) == 2 + 2 * len(STAGES) and "prepare-0" in states
    assert run.read_manifest(1, "seeds").metrics.get("perf/seeds_ahead") == 1.0
    # each evaluation is named after the policy it evaluates: θ_0, then θ_{k+1} after update k
    assert {n for n in states if n.startswith("evaluate")} == {"evaluate-θ0", "evaluate-θ1", "evaluate-θ2"}
    assert {s["name"] for s in states.values()} == {"Completed"}


def _artifacts(key: str) -> list[dict]:
    from prefect.client.orchestration import get_client

    # A plain API call: Prefect 3.7's client.read_artifacts sends null for omitted arguments,
    # which the server rejects, and any flow-run filter it accepts drops the rows.
    body = {"artifacts": {"key": {"any_": [key]}}, "limit": 200, "offset": 0, "sort": "CREATED_DESC"}
    with get_client(sync_client=True) as client:
        return client.request("POST", "/artifacts/filter", json=body).json()


def test_flow_publishes_artifacts(trained):
    table = _artifacts(artifact_key(RUN_ID, "metrics"))
    assert {a["type"] for a in table} == {"table"} and len(table) >= 3  # θ_0 + two iterations
    rows = json.loads(table[0]["data"])
    assert {"iteration", "stage", "name", "value"} <= set(rows[0])
    progress = _artifacts(artifact_key(RUN_ID, "progress"))
    assert progress and {a["type"] for a in progress} == {"progress"}
    assert float(progress[0]["data"]) == pytest.approx(100.0)


def _flow_run_log(flow_state) -> list[str]:
    """The messages of a flow run's log, as the UI shows it (read from the API)."""
    from prefect.client.orchestration import get_client
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    flow_run_id = str(flow_state.state_details.flow_run_id)
    body = {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "sort": "TIMESTAMP_ASC", "limit": 200, "offset": 0}
    with get_client(sync_client=True) as client:
        return [r["message"] for r in client.request("POST", "/logs/filter", json=body).json()]


def test_rerun_skips_every_stage_and_rewrites_nothing(in_runs):
    from thinking_seeds.pipeline.resume import resume_line

    run = in_runs.run
    before = _mtimes(run)
    published = len(_artifacts(artifact_key(RUN_ID, "metrics")))
    line = resume_line(run, load_saved_config(run.config_path))
    state = train_flow(preset="tiny", run_id=RUN_ID, overrides=in_runs.overrides, return_state=True)
    assert _mtimes(run) == before
    assert line and line in _flow_run_log(state)  # the UI's log says what `ts train` says: a resume
    assert len(_artifacts(artifact_key(RUN_ID, "metrics"))) == published  # skipped iterations publish nothing
    states = _task_states(state)
    assert len(states) == 2 + 2 * len(STAGES)
    for name, st in states.items():  # Prefect shows each skip, and why
        assert st["type"] == "COMPLETED" and st["name"] == "Skipped", (name, st)
        assert st["message"].startswith("skipped (manifest)"), (name, st)


def test_deleted_output_is_recomputed_and_nothing_else(in_runs):
    run = in_runs.run
    want = read_table(run.rollouts(1))
    before = _mtimes(run)
    run.rollouts(1).unlink()
    state = train_flow(preset="tiny", run_id=RUN_ID, overrides=in_runs.overrides, return_state=True)
    assert read_table(run.rollouts(1)).equals(want)  # deterministic: same rollouts again
    after = _mtimes(run)
    changed = {p for p in before if after[p] != before[p]}
    # verify@1 was redone; its digest is unchanged (same content), so update@1 and evaluate@1 stay.
    assert changed == {"manifests/iteration=1/verify.json"}
    ran = {name for name, st in _task_states(state).items() if st["name"] != "Skipped"}
    assert ran == {"verify-1"}
    # iteration 1 ran a stage: its metrics are published again, and only its
    latest = _artifacts(artifact_key(RUN_ID, "metrics"))[0]
    assert latest["flow_run_id"] == str(state.state_details.flow_run_id)
    assert {r["iteration"] for r in json.loads(latest["data"])} == {1}
    published = [a for a in _artifacts(artifact_key(RUN_ID, "metrics")) if a["flow_run_id"] == latest["flow_run_id"]]
    assert len(published) == 1


def test_changed_output_invalidates_downstream(in_runs):
    run = in_runs.run
    # Rewrite verify@1's rollouts as if another computation had produced them (the manifest
    # vouches for the new file), e.g. a plain-loop rerun with other code.
    t = read_table(run.rollouts(1), ROLLOUT_SCHEMA)
    adv = pa.array([0.5 * (-1) ** i for i in range(t.num_rows)], t.schema.field("advantage").type)
    write_table_atomic(
        t.set_column(t.schema.get_field_index("advantage"), "advantage", adv), run.rollouts(1), schema=ROLLOUT_SCHEMA
    )
    m = run.read_manifest(1, "verify")
    m.hashes["rollouts"] = run.file_hash(run.rollouts(1))
    run.write_manifest(m)
    before = _mtimes(run)
    train_flow(preset="tiny", run_id=RUN_ID, overrides=in_runs.overrides)
    after = _mtimes(run)
    changed = {p for p in before if after[p] != before[p]}
    assert changed == {"manifests/iteration=1/update.json", "manifests/iteration=1/evaluate.json"}
    assert run.read_manifest(1, "update").upstream["verify@1"] == run.read_manifest(1, "verify").digest


def test_evaluate_flow_latest_and_given_step(in_runs):
    run = in_runs.run
    out = evaluate_flow(run_id=RUN_ID)
    assert out["step"] == 2 and out["split"] == "validation"
    path = run.root / out["path"]
    assert path == run.metrics(2, "evaluate-validation") and path.is_file()
    # Same checkpoint, split and seed as the training run's last evaluation: the same numbers.
    trained_eval = run.read_manifest(1, "evaluate").metrics
    got = {k: v for k, v in out["metrics"].items() if not k.startswith("time/")}
    assert got.pop("eval/prompts") == load_saved_config(run.config_path).eval.prompts  # how many were sampled
    assert got == trained_eval
    test0 = evaluate_flow(run_id=RUN_ID, step=0, split="test")
    assert test0["step"] == 0 and run.metrics(0, "evaluate-test").is_file()
    with pytest.raises(Exception, match="no policy checkpoint|is not a run directory"):
        evaluate_flow(run_id="no_such_run")


def test_evaluate_flow_names_its_task_run_after_the_step(in_runs, tmp_path):
    """The task run says which policy step it evaluates (not "step-None-test" for "the latest"), on a
    split and on a user's verl-schema file (`data`: per-source avg@n / pass@k / maj@k)."""
    import pyarrow.parquet as pq

    state = evaluate_flow(run_id=RUN_ID, split="test", return_state=True)
    assert state.result()["step"] == 2
    assert set(_task_states(state, 1)) == {"evaluate-θ2-test"}
    # the evaluation's progress lines (printed) reach the UI's log, not only the worker's terminal
    assert any(m.startswith("evaluate θ_2") and "samples" in m for m in _flow_run_log(state)), _flow_run_log(state)
    rows = read_table(in_runs.run.data_dir / "test.parquet").to_pylist()[:2]
    for i, r in enumerate(rows):
        r.update(data_source=f"src{i}", extra_info={"split": "mine", "index": i})
    cols = ("data_source", "prompt", "ability", "reward_model", "extra_info")
    pq.write_table(pa.Table.from_pylist([{c: r[c] for c in cols} for r in rows]), tmp_path / "mine.parquet")
    state = evaluate_flow(run_id=RUN_ID, data=str(tmp_path / "mine.parquet"), samples=2, return_state=True)
    out = state.result()
    assert (out["step"], sorted(out["by_source"]), out["metrics"]["samples"]) == (2, ["src0", "src1"], 4)
    assert set(_task_states(state, 1)) == {"evaluate-θ2-mine"}
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        assert client.read_flow_run(state.state_details.flow_run_id).name == f"evaluate-{RUN_ID}-mine"
