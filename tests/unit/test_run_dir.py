"""The run directory: run ids that cannot be folder names are refused in one line, by the library and
the CLI. The lock (live owners, stale locks, races): e2e/test_faults_lock.py."""

import json

import pytest

from thinking_seeds.store.run_dir import RunDir


def test_run_id_must_be_a_plain_name(tmp_path):
    with pytest.raises(ValueError, match="plain name"):
        RunDir.for_run("../x", tmp_path)


@pytest.mark.parametrize("bad", ["x" * 300, "a b", "tab\there", "", ".hidden", "a/b"])
def test_unusable_run_ids_are_refused_in_one_line(tmp_path, bad):
    with pytest.raises(ValueError) as e:
        RunDir.for_run(bad, tmp_path)
    assert "\n" not in str(e.value) and "run id" in str(e.value)
    assert not any(tmp_path.iterdir())  # nothing written


def test_cli_long_run_id_is_one_line_exit_2(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from thinking_seeds.flows.cli import app

    monkeypatch.setenv("TS_RUNS_DIR", str(tmp_path))
    for args in (["sql", "SELECT 1", "--run-id", "x" * 300], ["check", "x" * 300], ["eval", "x" * 300, "--step", "1"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and "use at most 200" in " ".join(res.output.split()), (args, res.output)


def test_cli_eval_of_a_step_that_does_not_exist_is_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from thinking_seeds.flows.cli import app

    monkeypatch.setenv("TS_RUNS_DIR", str(tmp_path))
    for step in (0, 1):  # checkpoints as store.checkpoints lists them: a folder with its manifest
        folder = tmp_path / "r" / "policy" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        manifest = {"step": step, "created_at": "2026-01-01T00:00:00Z", "param_count": 1, "sha256": {}}
        (folder / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "r" / "config.yaml").write_text("seed: 0\n")
    res = CliRunner().invoke(app, ["eval", "r", "--step", "7"])
    assert res.exit_code == 2 and "has no policy step 7 (it has 0-1)" in " ".join(res.output.split()), res.output
