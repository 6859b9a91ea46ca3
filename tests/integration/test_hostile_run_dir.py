"""A run directory from anywhere cannot reach outside itself (issue #51): each hostile change to a copy
of the session's tiny run is refused in one line (exit 2, no traceback) by the command that would act
on it, `ts check` names it, and nothing outside the run changes (the victims' bytes are compared).

Cases: a manifest output `../../victim` and an absolute path (the old resume deleted the victim), a
`.lock` linked to a file (the old lock overwrote it), a run folder that is a link out of the runs dir
(the old temp sweep deleted in its target), a link inside a step folder and inside the data folder, a
pickle and a wrong-shaped tensor as `model.safetensors` (manifest updated to match), a sparse file
over TS_MAX_FILE_GB and a FIFO in place of a split (the old hash read 100 GB, or waited forever).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from tests.helpers.tiny import copy_run, copy_tree
from thinking_seeds.flows.cli import app


def _ts(*args: str):
    return CliRunner().invoke(app, list(args))


def _refused(res, *words: str) -> str:
    """The one line of a refusal: exit 2, no traceback, one line on stderr naming `words` (a resume's
    progress lines may come before it on stdout)."""
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "Traceback" not in res.output, (res.exit_code, res.output)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture
def hostile(tiny_run, tmp_path):
    """(run copy, victim folder outside it, its bytes now, train(), check())."""
    run = copy_run(tiny_run.run, tmp_path / "runs")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("not the run's to touch\n")
    (victim / "model.safetensors").write_bytes(b"x" * 64)
    (victim / ".tmp_victim").write_text("a temp-named file of someone else\n")
    base = str(run.root.parent)

    def train(run_id: str = run.run_id):
        sets = [x for o in tiny_run.overrides for x in ("--set", o)]
        return _ts("train", "--run-id", run_id, "--no-prefect", "--runs-dir", base, *sets)

    def check(run_id: str = run.run_id):
        res = _ts("check", run_id, "--runs-dir", base)
        return res.exit_code, res.output

    return run, victim, _tree(victim), train, check


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _set_manifest_output(run, k: int, stage: str, name: str, value: str) -> Path:
    path = run.manifest_path(k, stage)
    m = json.loads(path.read_text())
    m["outputs"][name] = value
    path.write_text(json.dumps(m, indent=2, sort_keys=True))
    return path


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_manifest_path_out_of_the_run_is_refused_and_nothing_outside_changes(hostile, form):
    run, victim, before, train, check = hostile
    value = "../../victim" if form == "relative" else str(victim)
    manifest = _set_manifest_output(run, 0, "update", "policy", value)
    code, out = check()
    line = next(x for x in out.splitlines() if str(manifest) in x)
    assert code == 1 and "outside" in line and "ts train --run-id" not in line, out  # never advises acting on it
    _refused(train(), "outside", str(victim) if form == "absolute" else "victim")
    assert _tree(victim) == before


def test_a_lock_linked_to_a_file_is_refused_and_the_file_kept(hostile):
    run, victim, before, train, check = hostile
    (run.root / ".lock").symlink_to(victim / "precious.txt")
    _refused(train(), ".lock", "link")
    code, out = check()
    assert code == 1 and ".lock is a link" in out, out
    assert _tree(victim) == before


def test_a_fifo_lock_does_not_hang_and_is_refused(hostile):
    run, _, _, train, _ = hostile
    os.mkfifo(run.root / ".lock")
    _refused(train(), ".lock", "not a regular file")


def test_a_run_folder_linked_out_of_the_runs_dir_is_refused(hostile, tmp_path):
    run, victim, _, train, check = hostile
    elsewhere = copy_tree(run.root, tmp_path / "elsewhere" / "evil")
    (elsewhere / "policy" / ".tmp_step_000009_x").mkdir()  # what a sweep of temps would delete
    (elsewhere / "rollouts" / "left.tmp").write_text("someone's file\n")
    kept = _tree(elsewhere)
    (run.root.parent / "evil").symlink_to(elsewhere)
    _refused(train("evil"), "evil", "outside the runs folder")
    code, out = check("evil")
    assert code == 2, out
    assert _tree(elsewhere) == kept and (elsewhere / "policy" / ".tmp_step_000009_x").is_dir()
    res = _ts("runs", "--runs-dir", str(run.root.parent))
    assert res.exit_code == 0 and "evil" not in res.output, res.output  # `ts runs` does not list it
    _refused(_ts("sql", "select count(*) from metrics", "--run-id", "evil", "--runs-dir", str(run.root.parent)), "evil")


def test_a_link_in_a_step_folder_is_not_exported(hostile, tmp_path):
    run, victim, before, _, _ = hostile
    step = run.policy(2)
    (step / "notes.txt").symlink_to(victim / "precious.txt")  # beside the listed files: not shipped
    out = tmp_path / "exported"
    res = _ts("export", run.run_id, "--step", "2", "--out", str(out), "--runs-dir", str(run.root.parent))
    assert res.exit_code == 0, res.output
    assert not (out / "notes.txt").exists() and "not the run's" not in "".join(
        p.read_text(errors="replace") for p in out.iterdir()
    )
    # a listed file replaced by a link to an outside copy of the same bytes (its hash still matches)
    copy = victim / "tokenizer.json"
    copy.write_bytes((step / "tokenizer.json").read_bytes())
    (step / "tokenizer.json").unlink()
    (step / "tokenizer.json").symlink_to(copy)
    before = _tree(victim)
    out2 = tmp_path / "exported2"
    _refused(
        _ts("export", run.run_id, "--step", "2", "--out", str(out2), "--runs-dir", str(run.root.parent)),
        "tokenizer.json",
        "outside",
    )
    assert not out2.exists() and _tree(victim) == before


def test_export_takes_the_model_card_from_the_hashed_config_only(hostile, tmp_path):
    run, *_ = hostile
    run.config_path.write_text(run.config_path.read_text() + "\nsecret: planted\n")
    out = tmp_path / "exported"
    _refused(
        _ts("export", run.run_id, "--out", str(out), "--runs-dir", str(run.root.parent)),
        "config.yaml",
    )
    assert not out.exists()


def test_a_split_linked_out_of_the_run_is_refused(hostile):
    run, victim, _, train, check = hostile
    split = run.data_dir / "validation.parquet"
    copy = victim / "validation.parquet"
    copy.write_bytes(split.read_bytes())  # the same bytes: the old hash check passed through the link
    split.unlink()
    split.symlink_to(copy)
    before = _tree(victim)
    code, out = check()
    assert code == 1 and "validation.parquet" in out and "outside" in out, out
    _refused(train(), "validation.parquet", "outside")
    assert _tree(victim) == before


def _update_checkpoint_manifest(step: Path, name: str) -> None:
    m = json.loads((step / "manifest.json").read_text())
    m["sha256"][name] = hashlib.sha256((step / name).read_bytes()).hexdigest()
    (step / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True))


class _Planted:
    """A pickle that, when unpickled, writes a marker file: no loader may ever run it."""

    marker = ""

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _pickled(step: Path, marker: Path) -> None:
    _Planted.marker = str(marker)
    torch.save({"w": _Planted()}, step / "model.safetensors")


def _wrong_shape(step: Path, marker: Path) -> None:
    tensors = load_file(step / "model.safetensors")
    name = next(k for k in tensors if k.endswith("embed_tokens.weight"))
    tensors[name] = torch.zeros(tensors[name].shape[0] + 3, tensors[name].shape[1])
    save_file(tensors, step / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize("make", [_pickled, _wrong_shape])
def test_weights_that_are_not_what_they_say_are_refused_naming_the_file(hostile, tmp_path, make):
    run, victim, before, _, _ = hostile
    step = run.policy(2)
    marker = tmp_path / "pickle-ran"
    make(step, marker)
    _update_checkpoint_manifest(step, "model.safetensors")  # the manifest vouches for the new bytes
    base = str(run.root.parent)
    _refused(_ts("eval", run.run_id, "--step", "2", "--no-prefect", "--runs-dir", base), "model.safetensors")
    _refused(
        _ts("export", run.run_id, "--step", "2", "--out", str(tmp_path / "o"), "--runs-dir", base), "model.safetensors"
    )
    assert not marker.exists() and _tree(victim) == before


def test_a_sparse_file_over_the_bound_is_not_read(hostile, monkeypatch):
    run, _, _, train, check = hostile
    monkeypatch.setenv("TS_MAX_FILE_GB", "1")
    split = run.data_dir / "validation.parquet"
    split.unlink()
    with open(split, "wb") as f:
        f.truncate(3 << 30)  # 3 GB of holes: a stat says it, reading it would take seconds
    code, out = check()
    assert code == 1 and "validation.parquet" in out and "TS_MAX_FILE_GB" in out, out
    _refused(train(), "validation.parquet", "TS_MAX_FILE_GB")


def test_a_fifo_in_place_of_a_split_is_refused_without_waiting(hostile):
    run, _, _, train, check = hostile
    split = run.data_dir / "validation.parquet"
    split.unlink()
    os.mkfifo(split)

    def unblock():  # the old code waited for a writer forever: after 20 s give every reader EOF, so it fails
        if done.wait(20):
            return
        while not done.wait(0.5):
            try:
                os.close(os.open(split, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO while no reader waits
            except OSError:
                pass

    done = threading.Event()
    threading.Thread(target=unblock, daemon=True).start()
    try:
        code, out = check()
        assert code == 1 and "validation.parquet" in out and "FIFO" in out, out
        _refused(train(), "validation.parquet", "FIFO")
    finally:
        done.set()


def test_sql_does_not_read_through_a_link_out_of_the_run(hostile):
    run, victim, _, _, _ = hostile
    import pyarrow.parquet as pq

    base = str(run.root.parent)
    query = ("sql", "select count(*) as n from rollouts", "--run-id", run.run_id, "--format", "csv", "--runs-dir", base)
    res = _ts(*query)
    total = int(res.output.split()[-1])
    linked = run.rollouts(1)
    rows = pq.read_metadata(linked).num_rows
    copy = victim / "rollouts.parquet"
    copy.write_bytes(linked.read_bytes())
    linked.unlink()
    linked.symlink_to(copy)
    res = _ts(*query)
    assert res.exit_code == 0 and int(res.output.split()[-1]) == total - rows > 0, res.output
