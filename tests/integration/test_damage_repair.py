"""Nothing damaged is ever blessed: for each kind of damage to a finished run (a split truncated or
altered, config.yaml, a manifest, weights, a Parquet output), `ts check` names it with a command,
following that command leaves the run correct (every file as before the damage) or refuses in one
line, and `ts check` never calls an altered file intact. Copies of the session's tiny run; the repairs
are resumes that redo one stage, a second or so each."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from tests.helpers.tiny import copy_run
from thinking_seeds.engine.models import load_model
from thinking_seeds.flows.cli import app
from thinking_seeds.store.checkpoints import save_checkpoint


def _ts(*args: str):
    return CliRunner().invoke(app, list(args))


def _check(run) -> tuple[int, str]:
    res = _ts("check", run.run_id, "--runs-dir", str(run.root.parent))
    return res.exit_code, " ".join(res.output.split())


def _train(run, overrides: list[str]):
    sets = [x for o in overrides for x in ("--set", o)]
    return _ts("train", "--run-id", run.run_id, "--no-prefect", "--runs-dir", str(run.root.parent), *sets)


def _bytes(run) -> dict[str, bytes]:
    """Every file of the run that a stage wrote and the repair must give back (not timings or locks)."""
    out = {}
    for p in sorted(run.root.rglob("*")):
        rel = run.rel(p)
        if p.is_file() and not rel.startswith(("manifests/", "metrics/", ".lock", "reports/")):
            if "/step_" in rel and p.name == "manifest.json":
                continue  # a checkpoint written again has a new created_at; its files are compared instead
            out[rel] = p.read_bytes()
    return out


def _rewrite_parquet(path: Path, change) -> None:
    """Rewrite a Parquet file as a valid file with other values (what an edit, not bit rot, does)."""
    schema = pq.read_schema(path)
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        change(r)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _ground_truth_999(r):
    r["reward_model"]["ground_truth"] = "999"


def _edit_weights(run, step: int) -> None:
    """Weights changed and their checkpoint manifest written to match: whole in itself, not the run's."""
    d = run.policy(step)
    model, tok = load_model(d)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    save_checkpoint(model, tok, d.parent, step, overwrite=True)


def _edit_manifest_hash(run, k: int, stage: str, name: str) -> None:
    path = run.manifest_path(k, stage)
    m = json.loads(path.read_text())
    m["hashes"][name] = "0" * 64
    path.write_text(json.dumps(m, indent=2, sort_keys=True))


DAMAGE = {
    "split_truncated": (
        lambda run: (run.data_dir / "validation.parquet").write_bytes(b"PAR1"),
        "builds this split again",
    ),
    "split_altered": (lambda run: _rewrite_parquet(run.data_dir / "validation.parquet", _ground_truth_999), "builds"),
    "test_split_altered": (lambda run: _rewrite_parquet(run.data_dir / "test.parquet", _ground_truth_999), "builds"),
    "config_truncated": (lambda run: run.config_path.write_text(run.config_path.read_text()[:200]), "writes it again"),
    "config_missing": (lambda run: run.config_path.unlink(), "writes it again"),
    "prepare_manifest_torn": (lambda run: run.manifest_path(0, "prepare").write_text('{"stage": '), "redo prepare"),
    "manifest_edited": (lambda run: _edit_manifest_hash(run, 0, "verify", "rollouts"), "redo update of iteration 0"),
    "weights_step1_edited": (lambda run: _edit_weights(run, 1), "redo update of iteration 0"),
    "parquet_altered": (lambda run: _rewrite_parquet(run.rollouts(1), lambda r: r.update(reward=7.0)), "redo verify"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_check_names_the_damage_and_its_advice_repairs_it(kind, tiny_run, tmp_path):
    run = copy_run(tiny_run.run, tmp_path / "runs")
    before = _bytes(run)
    damage, advice = DAMAGE[kind]
    damage(run)
    code, out = _check(run)
    assert code == 1 and "ts train --run-id tiny" in out and advice in out, out
    res = _train(run, tiny_run.overrides)
    assert res.exit_code == 0, res.output
    code, out = _check(run)
    assert code == 0 and "run tiny is intact" in out, out
    after = _bytes(run)
    assert sorted(after) == sorted(before)
    changed = [rel for rel in before if after[rel] != before[rel]]
    if kind == "weights_step1_edited":
        # θ_1 is computed again (its update redone): its tensors equal the original's up to float noise
        # (seen: 2e-9; the edit added 0.5), every other file of the run is byte for byte as before
        from safetensors.torch import load

        for name in ("model.safetensors", "optimizer.safetensors"):
            rel = f"policy/step_000001/{name}"
            a, b = load(before[rel]), load(after[rel])
            assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a), rel
        changed = [rel for rel in changed if not rel.startswith("policy/step_000001/")]
    assert not changed, changed


def test_a_config_that_the_given_settings_do_not_write_is_refused_in_one_line(tiny_run, tmp_path):
    run = copy_run(tiny_run.run, tmp_path / "runs")
    run.config_path.write_text(run.config_path.read_text()[:200])
    res = _train(run, [*tiny_run.overrides, "seed=5"])
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "config.yaml is damaged or was edited" in lines[0] and "restore config.yaml" in lines[0]


def test_eval_checks_the_config_before_importing_what_it_names(tiny_run, tmp_path, monkeypatch):
    """A copied run whose config.yaml names a reward fn: `ts eval` refuses before the module is imported."""
    run = copy_run(tiny_run.run, tmp_path / "runs")
    marker = tmp_path / "imported"
    (tmp_path / "planted.py").write_text(
        f"open({str(marker)!r}, 'w').write('x')\ndef score(data_source, solution_str, ground_truth, extra_info):\n"
        "    return 1.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    text = run.config_path.read_text()
    assert "fn: null" in text
    run.config_path.write_text(text.replace("fn: null", "fn: planted:score", 1))
    res = _ts("eval", run.run_id, "--no-prefect", "--runs-dir", str(run.root.parent))
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "is damaged or was edited" in lines[0], res.output
    assert not marker.exists()


def test_an_edited_theta0_is_copied_again_from_the_base_model(tiny_run, tmp_path):
    """θ_0 whole in itself but not the run's (its checkpoint manifest rewritten to match): `ts check`
    names it, and prepare copies the base model again instead of recording it. (A run's later stages
    are then redone from the new θ_0: test_faults_weights' policy0_delete pays that; prepare alone here.)"""
    from thinking_seeds.pipeline.loop import prepare_outcome
    from thinking_seeds.store.run_dir import RunDir

    run = RunDir.for_run("p", tmp_path / "runs")
    prepare_outcome(run, tiny_run.cfg)
    weights = (run.policy(0) / "model.safetensors").read_bytes()
    _edit_weights(run, 0)
    assert (run.policy(0) / "model.safetensors").read_bytes() != weights
    code, out = _check(run)
    assert code == 1 and "policy/step_000000 no longer hashes" in out and "copies θ_0 again" in out, out
    run.acquire_lock()  # as the loop does: the owner sets the unrecorded checkpoint aside
    try:
        assert not prepare_outcome(run, tiny_run.cfg).skipped
    finally:
        run.release_lock()
    assert (run.policy(0) / "model.safetensors").read_bytes() == weights
    assert _check(run)[0] == 0


def test_a_users_split_is_copied_again_or_refused_naming_it(tiny_run, tmp_path):
    """data.source=parquet: the run's copy of a user's file, damaged, is copied again from that file --
    unless the file changed since the run started: then one line names both (prepare alone, seconds)."""
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline.loop import prepare_outcome
    from thinking_seeds.store.parquet_io import DataError
    from thinking_seeds.store.run_dir import RunDir

    mine = tmp_path / "mine"
    mine.mkdir()
    for split in ("train", "validation"):
        (mine / f"{split}.parquet").write_bytes((tiny_run.run.data_dir / f"{split}.parquet").read_bytes())
    paths = [f"data.train_path={mine / 'train.parquet'}", f"data.val_path={mine / 'validation.parquet'}"]
    cfg = load_config("tiny", [*tiny_run.overrides, "data.source=parquet", *paths])
    run = RunDir.for_run("u", tmp_path / "runs")
    prepare_outcome(run, cfg)
    copy = run.data_dir / "train.parquet"
    original = copy.read_bytes()
    copy.write_bytes(b"PAR1")
    assert not prepare_outcome(run, cfg).skipped
    assert copy.read_bytes() == original
    copy.write_bytes(b"PAR1")
    _rewrite_parquet(mine / "train.parquet", _ground_truth_999)
    with pytest.raises(DataError) as e:
        prepare_outcome(run, cfg)
    msg = str(e.value)
    assert "\n" not in msg and str(copy) in msg and f"data.train_path={mine / 'train.parquet'}" in msg
    assert copy.read_bytes() == b"PAR1"  # the changed file was not copied in: `ts check` still says damaged
    code, out = _check(run)
    assert code == 1 and "train.parquet no longer hashes" in out and "copies it again from data.train_path" in out, out


def test_check_names_a_damaged_extension(tiny_run, tmp_path):
    run = copy_run(tiny_run.run, tmp_path / "runs")
    (run.root / "extension.json").write_text('{"iterations": ')
    code, out = _check(run)
    assert code == 1 and "extension.json is damaged" in out and "delete it and run `ts train --run-id tiny`" in out
