"""The Prefect training and evaluation flows on the random tiny model (in this process).

- a run completes, with a manifest per stage, cache records in the run directory, and artifacts;
- re-running with the same run id hits the cache for every stage and rewrites nothing;
- a deleted output is recomputed (the stale cache record is refreshed), and only what depends on it;
- a stage output that changed on disk invalidates everything downstream (Merkle chain of digests);
- the cache key ignores the flow run and follows (run id, iteration, stage, config, upstream);
- evaluate_flow evaluates the latest (or a given) checkpoint and writes its metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from thinking_seeds.flows.evaluate import evaluate_flow
from thinking_seeds.flows.train import train_flow
from thinking_seeds.tasks.common import RESULTS_DIRNAME, StageCachePolicy, artifact_key
from thinking_seeds.config import load_saved_config
from thinking_seeds.store.parquet_io import read_table, write_table_atomic
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import ROLLOUT_SCHEMA
from thinking_seeds.pipeline.stages import STAGES

RUN_ID = "flow_test"


def _mtimes(run: RunDir) -> dict[str, int]:
    return {str(p.relative_to(run.root)): p.stat().st_mtime_ns
            for p in sorted((run.root / "manifests").glob("iteration=*/*.json"))}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_overrides):
    base = tmp_path_factory.mktemp("flow-runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("TS_RUNS_DIR", str(base))
    root = train_flow(preset="tiny", run_id=RUN_ID, overrides=tiny_overrides)
    yield SimpleNamespace(run=RunDir(Path(root)), overrides=tiny_overrides, base=base)
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
    keys = sorted(p.name.rsplit("-", 1)[0] for p in (run.root / RESULTS_DIRNAME).iterdir())
    assert keys.count("verify-1") == 1 and keys.count("evaluate--1") == 1 and len(keys) == 2 + 2 * len(STAGES)


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


def test_rerun_hits_the_cache_and_rewrites_nothing(in_runs):
    run = in_runs.run
    before = _mtimes(run)
    results_before = {p.name: p.stat().st_mtime_ns for p in (run.root / RESULTS_DIRNAME).iterdir()}
    train_flow(preset="tiny", run_id=RUN_ID, overrides=in_runs.overrides)
    assert _mtimes(run) == before
    assert {p.name: p.stat().st_mtime_ns for p in (run.root / RESULTS_DIRNAME).iterdir()} == results_before


def test_deleted_output_is_recomputed_and_nothing_else(in_runs):
    run = in_runs.run
    want = read_table(run.rollouts(1))
    before = _mtimes(run)
    run.rollouts(1).unlink()
    train_flow(preset="tiny", run_id=RUN_ID, overrides=in_runs.overrides)
    assert read_table(run.rollouts(1)).equals(want)  # deterministic: same rollouts again
    after = _mtimes(run)
    changed = {p for p in before if after[p] != before[p]}
    # verify@1 was redone; its digest is unchanged (same content), so update@1 and evaluate@1 stay.
    assert changed == {"manifests/iteration=1/verify.json"}


def test_changed_output_invalidates_downstream(in_runs):
    run = in_runs.run
    # Rewrite verify@1's rollouts as if another computation had produced them (the manifest
    # vouches for the new file), e.g. a plain-loop rerun with other code.
    t = read_table(run.rollouts(1), ROLLOUT_SCHEMA)
    adv = pa.array([0.5 * (-1) ** i for i in range(t.num_rows)], t.schema.field("advantage").type)
    write_table_atomic(t.set_column(t.schema.get_field_index("advantage"), "advantage", adv), run.rollouts(1),
                       schema=ROLLOUT_SCHEMA)
    m = run.read_manifest(1, "verify")
    m.hashes["rollouts"] = run.file_hash(run.rollouts(1))
    run.write_manifest(m)
    before = _mtimes(run)
    train_flow(preset="tiny", run_id=RUN_ID, overrides=in_runs.overrides)
    after = _mtimes(run)
    changed = {p for p in before if after[p] != before[p]}
    assert changed == {"manifests/iteration=1/update.json", "manifests/iteration=1/evaluate.json"}
    assert run.read_manifest(1, "update").upstream["verify@1"] == run.read_manifest(1, "verify").digest


def test_cache_key_has_no_flow_run_and_follows_inputs():
    policy = StageCachePolicy()
    ctx = SimpleNamespace(task=SimpleNamespace(name="verify"))
    up = {"continuation@1": {"stage": "continuation", "iteration": 1, "config_hash": "c", "hashes": {"generated": "x"}}}
    inputs = {"run_dir": "/a/runs/r1", "k": 1, "config_hash": "h", "upstream": up}
    key = policy.compute_key(ctx, inputs, {"run_id": "whatever"})
    assert key.startswith("verify-1-")
    assert policy.compute_key(ctx, dict(inputs, run_dir="/elsewhere/r1"), {}) == key  # run id, not path
    assert policy.compute_key(ctx, dict(inputs, config_hash="h2"), {}) != key
    assert policy.compute_key(ctx, dict(inputs, k=2), {}) != key
    changed = {"continuation@1": dict(up["continuation@1"], hashes={"generated": "y"})}
    assert policy.compute_key(ctx, dict(inputs, upstream=changed), {}) != key
    timing = {"continuation@1": dict(up["continuation@1"], seconds={"generation": 9.0}, metrics={"a": 1.0})}
    assert policy.compute_key(ctx, dict(inputs, upstream=timing), {}) == key  # timings are not inputs


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
