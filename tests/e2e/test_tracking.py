"""Experiment trackers (`logger`): every metric reaches TensorBoard, MLflow and W&B (offline), read
back with each library's own reader and compared with the run's Parquet metrics."""

import glob
import json
import struct

import pytest

from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.sql import connect, query

pytestmark = pytest.mark.slow  # three trackers' start-up (~40 s on a loaded machine): CI's slow step

SMALL = [
    "iterations=2",
    "rollout.prompts_per_iteration=4",
    "data.train_size=40",
    "data.val_size=8",
    "data.test_size=8",
    "eval.prompts=4",
    "eval.samples=2",
    "eval.every=1",
    "eval.seeded=false",
    "logger=[console, tensorboard, mlflow, wandb]",
]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, tiny_model_dir):
    runs = tmp_path_factory.mktemp("runs")
    run = train(RunDir.for_run("trk", runs), load_config("tiny", SMALL + [f"model.path={tiny_model_dir}"]))
    con = connect(runs_dir=runs)
    rows = query(con, "SELECT iteration, stage, name, value FROM metrics WHERE run_id = 'trk'").rows
    con.close()
    truth = {(st, name, it): v for it, st, name, v in rows}
    return run, truth


def _truth(truth, name):
    """{step: value} of a metric as the trackers' steps count: iteration, or policy step for eval."""
    return {it: v for (st, n, it), v in truth.items() if n == name}


def test_tensorboard(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, truth = tracked
    acc = EventAccumulator(str(run.root / "tensorboard"))
    acc.Reload()
    for name in ("reward/mean", "actor/entropy/all", "eval/accuracy", "time/update/update_total"):
        got = {e.step: e.value for e in acc.Scalars(name)}
        assert got == pytest.approx(_truth(truth, name)), name
    assert {n for _, n, _ in truth} <= set(acc.Tags()["scalars"])  # every metric of the run
    (config,) = acc.Tensors("config/text_summary")  # and the config, as text
    assert "algorithm: thinking_seeds" in config.tensor_proto.string_val[0].decode()


def test_mlflow(tracked):
    import mlflow

    run, truth = tracked
    client = mlflow.MlflowClient(tracking_uri=(run.root / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("thinking-seeds")
    (r,) = client.search_runs([exp.experiment_id])
    assert r.info.run_name == "trk" and r.data.params["algorithm"] == "thinking_seeds"
    assert r.data.params["rollout.prompts_per_iteration"] == "4"
    logged = set(r.data.metrics)
    assert {n.replace("@", "_at_").replace("=", "_") for _, n, _ in truth} <= logged  # every metric of the run
    for name, key in (("reward/mean", "reward/mean"), ("eval/pass@2", "eval/pass_at_2")):
        got = {m.step: m.value for m in client.get_metric_history(r.info.run_id, key)}
        assert got == pytest.approx(_truth(truth, name)), name


def _wandb_records(path):
    """Records of W&B's offline transaction log (the LevelDB log format), parsed with wandb's own
    protobuf Record type. wandb 0.31 has no public reader for offline runs (its Api needs a server)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert struct.unpack("<4sHB", data[:7])[0] == b":W&B"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # FULL/FIRST start a record, MIDDLE/LAST continue it
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def test_wandb_offline(tracked):
    run, truth = tracked
    (path,) = glob.glob(str(run.root / "wandb" / "offline-run-*" / "run-trk.wandb"))
    history, config = [], {}
    for rec in _wandb_records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "run":  # the run record carries the config given to wandb.init
            config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
    assert {n for _, n, _ in truth} <= {k for h in history for k in h}  # every metric of the run
    for name in ("reward/mean", "eval/accuracy"):
        got = {h["_step"]: h[name] for h in history if name in h}
        assert got == pytest.approx(_truth(truth, name)), name
    assert config["algorithm"] == "thinking_seeds" and config["rollout.prompts_per_iteration"] == 4
