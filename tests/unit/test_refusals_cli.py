"""User mistakes that ended in a traceback, a wait without end, or were silently ignored: each is now one
line on stderr and exit 2 (or, for `ts check`, a damage line and exit 1) -- before anything is trained
or waited for."""

from __future__ import annotations

import errno
import json

import pytest
from typer.testing import CliRunner

from thinking_seeds.data.asdiv import asdiv_rows
from thinking_seeds.flows.cli import _is_user_error, app
from thinking_seeds.store.parquet_io import DataError


class _WouldRun(Exception):
    """Raised where the command would train or wait: the refusal must come before it."""


def _ts(tmp_path, *args):
    return CliRunner().invoke(app, list(args), env={"TS_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "250"})


def _one_line(res, expected: str) -> str:
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.output
    text = " ".join(res.output.split())
    assert expected in text and "Traceback" not in text, res.output
    return text


# --- ts data asdiv -----------------------------------------------------------------------------------


def test_asdiv_passage_that_is_not_text_names_file_and_line(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"passage": "p", "question": "q", "answer": "2"}) + "\n")
    src.write_text(src.read_text() + json.dumps({"passage": 1, "question": "q", "answer": "3"}) + "\n")
    with pytest.raises(DataError, match=r"a\.jsonl: line 2 has a passage or question that is not text"):
        asdiv_rows(src)
    _one_line(_ts(tmp_path, "data", "asdiv", "--source", str(src), "--out", str(tmp_path / "o.parquet")), "line 2")
    assert not (tmp_path / "o.parquet").exists()


def test_asdiv_source_not_utf8_names_the_file(tmp_path):
    src = tmp_path / "b.jsonl"
    src.write_bytes(b'\xff\xfe{"passage": "p"}\n')
    text = _one_line(_ts(tmp_path, "data", "asdiv", "--source", str(src), "--out", str(tmp_path / "o.parquet")), "")
    assert f"{src} is not UTF-8" in text and "JSON lines" in text, text


@pytest.mark.parametrize(
    ("content", "why"),
    [("", "it has no ASDiv rows"), ('{"passage": "p", "question": "q", "answer": "Bo"}\n', "none of its 1 answers")],
)
def test_asdiv_source_without_problems_is_refused(tmp_path, content, why):
    src = tmp_path / "c.jsonl"
    src.write_text(content)
    res = _ts(tmp_path, "data", "asdiv", "--source", str(src), "--out", str(tmp_path / "o.parquet"))
    assert f"{src}: no problems to write ({why}" in _one_line(res, why)
    assert not (tmp_path / "o.parquet").exists()


# --- a folder where a file is expected (flows/cli/errors.py) ---------------------------------------


def test_path_errors_are_user_errors_other_os_errors_are_not():
    for e in (IsADirectoryError(errno.EISDIR, "x"), NotADirectoryError(errno.ENOTDIR, "x"), FileNotFoundError()):
        assert _is_user_error(e)
    assert not _is_user_error(OSError(errno.EIO, "Input/output error"))  # a failing disk is no user's mistake


def test_a_folder_given_as_a_file_is_one_line_naming_it(tmp_path):
    (tmp_path / "D.yaml").mkdir()
    text = _one_line(_ts(tmp_path, "config", "show", "--preset", str(tmp_path / "D.yaml")), "is a directory")
    assert str(tmp_path / "D.yaml") in text and "not a folder" in text
    src = tmp_path / "g.jsonl"
    src.write_text(json.dumps({"passage": "p", "question": "q", "answer": "3"}) + "\n")
    (tmp_path / "outdir").mkdir()
    text = _one_line(_ts(tmp_path, "data", "asdiv", "--source", str(src), "--out", str(tmp_path / "outdir")), "")
    assert f"{tmp_path / 'outdir'}: is a directory" in text and ".tmp" not in text, text  # the path given
    _one_line(_ts(tmp_path, "config", "show", "--preset", str(src / "x.yaml")), "no file")


# --- ts trainer-node ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--machine-rank", "1", "--wait", "nan"], "--wait"),
        (["--machine-rank", "1", "--wait", "inf"], "--wait"),
        (["--machine-rank", "1", "--wait", "-1"], "--wait"),
    ],
)
def test_trainer_node_refuses_a_bad_wait_at_once(tmp_path, monkeypatch, args, expected):
    import thinking_seeds.pipeline.trainer_client as trainer_client

    def would_wait(*a, **k):
        raise _WouldRun("joined (waited) instead of refusing")

    monkeypatch.setattr(trainer_client, "join_trainer_group", would_wait)
    _one_line(_ts(tmp_path, "trainer-node", "--run-id", "nope", *args), expected)


# --- ts compare: options without the option they belong to ----------------------------------------


@pytest.fixture
def no_training(monkeypatch):
    import thinking_seeds.experiments.compare as compare

    def would_train(*a, **k):
        raise _WouldRun("the comparison went on to prepare and train")

    monkeypatch.setattr(compare, "prepare", would_train)


PLAN = ["--plan", "--plan-sd", "0.03"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--plan-from", "docs/results/x"], "--plan-from goes with --plan"),
        (["--plan-sd", "0.03"], "--plan-sd goes with --plan"),
        ([*PLAN, "--no-control", "--control-seconds", "5"], "--control-seconds goes with the SFT control"),
        ([*PLAN, "--no-control", "--control-corpus", "5"], "--control-corpus goes with the SFT control"),
        ([*PLAN, "--no-control", "--control-seeds", "1"], "--control-seeds goes with the SFT control"),
        (["--select-set", "eval.every=5"], "--select-set goes with --select"),
        (["--select-seeds", "0-2"], "--select-seeds goes with --select"),  # its default, given: still refused
        (["--select-methods", "grpo"], "--select-methods goes with --select"),
        (["--select-follow", "seq_mix=grpo"], "--select-follow goes with --select"),
        (["--select-on", "validation"], "--select-on goes with --select"),
        ([*PLAN, "--control-seeds", "1,1"], "--control-seeds '1,1' names a seed twice"),
        ([*PLAN, "--select", "lr=1e-4,3e-4", "--select-seeds", "1,1"], "--select-seeds '1,1' names a seed twice"),
        ([*PLAN, "--control-seeds", "1-x"], "--control-seeds '1-x': give seeds as a range or a list, e.g. 200-202"),
        ([*PLAN, "--select", "lr=1e-4,3e-4", "--select-seeds", "a"], "--select-seeds 'a': seeds must be integers"),
    ],
)
def test_compare_refuses_options_without_their_option(tmp_path, no_training, args, expected):
    text = _one_line(_ts(tmp_path, "compare", "--out", str(tmp_path / "out"), "--id", "t", *args), expected)
    assert "method 'x" not in text and "control_seeds:" not in text, text


def test_compare_plan_with_control_and_select_options_still_plans(tmp_path, no_training):
    args = [*PLAN, "--control-seeds", "200-201", "--select", "lr=1e-4,3e-4", "--select-seeds", "1,2"]
    res = _ts(tmp_path, "compare", "--out", str(tmp_path / "out"), "--id", "t", *args)
    assert res.exit_code == 0, res.output


# --- ts plan / ts eval ---------------------------------------------------------------------------------


def test_plan_gpu_gib_goes_with_gpus(tmp_path):
    _one_line(_ts(tmp_path, "plan", "--gpu-gib", "1"), "--gpu-gib goes with --gpus N")


def test_eval_split_goes_without_data(tmp_path):
    _one_line(_ts(tmp_path, "eval", "nope", "--data", str(tmp_path / "x.parquet"), "--split", "test"), "--split")
    assert "--split" not in _ts(tmp_path, "eval", "nope", "--split", "test").output  # without --data: the run's


# --- ts check ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["foo: [\n", "- a list\n", b"\xff\xfe"])
def test_check_reports_a_config_that_does_not_read(tmp_path, content):
    run = tmp_path / "runs" / "bad"
    run.mkdir(parents=True)
    (run / "config.yaml").write_bytes(content if isinstance(content, bytes) else content.encode())
    res = _ts(tmp_path, "check", "bad")
    text = " ".join(res.output.split())
    assert res.exit_code == 1 and "intact" not in text and "Traceback" not in text, res.output
    assert f"damaged: {run / 'config.yaml'} is damaged" in text and "restore it from a copy of the run" in text


# --- ts config show --preset ---------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["nope.yaml", "nope.yml", "some/dir/nope"])
def test_a_preset_path_that_does_not_exist_is_named_as_given(tmp_path, given):
    text = _one_line(_ts(tmp_path, "config", "show", "--preset", given), f"no file {given}:")
    assert ".yaml.yaml" not in text and "presets/" not in text, text
