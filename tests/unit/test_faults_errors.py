"""One-line refusals (issue #11, item 5): a user's mistake ends in ONE line that says what is wrong,
where, and how to fix it -- never a traceback, never a half-written run, never advice to delete the
user's own file. Covers wrongly typed or empty verl Parquet data sets (library and `ts train`), the
wording of unreadable Parquet files by where they live, and config values of the wrong type; plus
the leftovers of items 1 and 6 (vLLM weight loads verified; reports and SFT-control files follow
the umask). Where a flow would start (`ts train`, the train flow): integration/test_faults_errors_flow.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.helpers.verl_data import GOOD, one_line, train_args, write
from thinking_seeds.config import ConfigError, load_config, load_saved_config, parse_overrides, save_config
from thinking_seeds.data.sources import load_dataset
from thinking_seeds.flows.cli import app
from thinking_seeds.store.parquet_io import DataError, content_hash, read_table

runner = CliRunner()

# --- wrongly typed columns ----------------------------------------------------------------------

WRONG_TYPES = [
    # column, value, found type, expected type (as the message writes them)
    (
        "reward_model",
        ['{"style": "rule", "ground_truth": "3"}'] * 2,
        "string",
        "struct<style: string, ground_truth: string>",
    ),
    ("prompt", [1, 2], "int64", "list<struct<role: string, content: string>>"),
    ("prompt", ["1+2=", "3+4="], "string", "list<struct<role: string, content: string>>"),
    ("data_source", [1, 2], "int64", "string"),
    (
        "reward_model",
        [{"answer": "3"}, {"answer": "7"}],
        "struct<answer: string>",
        "struct<style: string, ground_truth: string>",
    ),
    ("extra_info", ['{"index": 0}'] * 2, "string", "struct<split: string, index: int64"),
]


@pytest.mark.parametrize("column, value, found, expected", WRONG_TYPES)
def test_wrongly_typed_column_is_one_line_naming_file_column_types_and_fix(tmp_path, column, value, found, expected):
    path = write(tmp_path / "mine.parquet", **{column: value})
    with pytest.raises(DataError) as e:
        load_dataset(path)
    msg = one_line(str(e.value))
    assert str(path) in msg and f"column {column!r}" in msg
    assert f"has type {found}," in msg and f"expected {expected}" in msg
    assert "to fix, write that column as" in msg


def test_compatible_layouts_still_load(tmp_path):
    """The type check is no stricter than the reader: extra struct fields, large strings, integer
    ground truths, string indices and all-null optional columns load as before."""
    path = write(
        tmp_path / "ok.parquet",
        data_source=pa.array(["a", "b"], pa.large_string()),
        reward_model=[
            {"style": "rule", "ground_truth": 3, "extra": 1},
            {"style": "rule", "ground_truth": 7, "extra": 2},
        ],
        extra_info=[{"split": "t", "index": "0"}, {"split": "t", "index": "1"}],
        ability=pa.array([None, None], pa.null()),
        target=pa.array([None, None], pa.null()),
    )
    prompts = load_dataset(path)
    assert [p.ground_truth for p in prompts] == ["3", "7"] and prompts[0].prompt_id == "t-0"


# --- empty data sets ----------------------------------------------------------------------------


def empty(path: Path) -> Path:
    """The right columns and types, no rows (a filter that dropped everything)."""
    pq.write_table(pa.table(GOOD).schema.empty_table(), path)
    return path


def test_a_data_set_without_rows_is_refused_naming_the_file(tmp_path):
    path = empty(tmp_path / "none.parquet")
    with pytest.raises(DataError) as e:
        load_dataset(path)
    msg = one_line(str(e.value))
    assert str(path) in msg and "has no rows" in msg


def test_prepare_refuses_an_empty_data_set_before_loading_the_model(tmp_path, monkeypatch):
    from thinking_seeds.pipeline import stage_prepare
    from thinking_seeds.store.run_dir import RunDir

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the data set was checked")

    monkeypatch.setattr(stage_prepare, "load_model", no_model)
    train = empty(tmp_path / "train.parquet")
    cfg = load_config(
        "tiny", ["data.source=parquet", f"data.train_path={train}", f"data.val_path={write(tmp_path / 'val.parquet')}"]
    )
    with pytest.raises(DataError, match=f"{train} has no rows"):
        stage_prepare.prepare(RunDir(tmp_path / "runs" / "e"), cfg)


def test_ts_train_refuses_an_empty_data_set_and_writes_nothing(tmp_path, runs_dir):
    val = empty(tmp_path / "val.parquet")
    r = runner.invoke(app, train_args(write(tmp_path / "train.parquet"), val) + ["--no-prefect"])
    assert r.exit_code == 2, r.output
    assert str(val) in one_line(r.stderr.strip()) and "has no rows" in r.stderr
    assert list(runs_dir.iterdir()) == []


# --- unreadable Parquet: advice by where the file lives -------------------------------------------


def corrupt(path: Path) -> Path:
    write(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def test_a_users_unreadable_file_is_never_called_disposable(tmp_path):
    path = corrupt(tmp_path / "mine.parquet")
    for call in (lambda: read_table(path), lambda: load_dataset(path)):
        with pytest.raises(DataError) as e:
            call()
        msg = one_line(str(e.value)).lower()
        assert str(path).lower() in msg and "truncated or corrupt" in msg
        assert "delete" not in msg and "re-run the stage" not in msg and "remove" not in msg
        assert "export it again" in msg
    missing = tmp_path / "typo.parquet"
    for call in (lambda: read_table(missing), lambda: content_hash(missing)):
        with pytest.raises(DataError) as e:
            call()
        msg = one_line(str(e.value))
        assert str(missing) in msg and "check the path" in msg and "re-run the stage" not in msg


def test_a_runs_own_unreadable_file_may_be_redone(tmp_path):
    run = tmp_path / "runs" / "r7"
    (run / "rollouts" / "iteration=0").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    path = corrupt(run / "rollouts" / "iteration=0" / "rollouts.parquet")
    with pytest.raises(DataError) as e:
        read_table(path)
    msg = one_line(str(e.value))
    assert "delete it and re-run the stage that writes it" in msg and "ts train --run-id r7" in msg
    path.unlink()
    with pytest.raises(DataError) as e:
        read_table(path)
    assert "not found" in str(e.value) and "re-run the stage" in str(e.value) and "delete" not in str(e.value)
    # the same name outside a run's own folders (a user's file next to a config.yaml) is not ours
    user = corrupt(run / "my_data.parquet")
    with pytest.raises(DataError) as e:
        read_table(user)
    assert "delete" not in str(e.value).lower()


# --- config values of the wrong type --------------------------------------------------------------


@pytest.mark.parametrize(
    "override, needle",
    [
        ("iterations=2.5", "iterations: must be a whole number, e.g. 3 (got 2.5, which is a number)"),
        ("iterations=2.0", "iterations: must be a whole number"),
        ('iterations="3"', "iterations: must be a whole number, e.g. 3 (got '3', which is text)"),
        ("rollout.group_size=true", "rollout.group_size: must be a whole number, e.g. 3 (got True, which is a bool)"),
        ("update.lr=abc", "update.lr: must be a number, e.g. 0.5 or 1e-4 (got 'abc', which is text)"),
        ("update.lr=true", "update.lr: must be a number"),
        ("eval.seeded=yes_please", "eval.seeded: must be true or false (got 'yes_please', which is text)"),
        ("eval.seeded=1", "eval.seeded: must be true or false (got 1, which is a whole number)"),
        ('eval.seeded="true"', "eval.seeded: must be true or false (got 'true', which is text)"),
        ("update.betas=[0.9, true]", "update.betas.1: must be a number"),
    ],
)
def test_wrongly_typed_config_values_are_refused_not_coerced(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", [override])
    assert needle in str(e.value)
    r = runner.invoke(app, ["config", "show", "--set", override])
    assert r.exit_code == 2 and needle in r.stderr
    assert one_line(r.stderr.strip()).startswith("error: invalid configuration")


def test_numbers_are_still_numbers(tmp_path):
    assert parse_overrides(["a=1e-4", "b=3E5", "c=1.0e4", "d=-2e-5", "e=0.5", "f=1e", "g=1e-4x"]) == {
        "a": 1e-4,
        "b": 3e5,
        "c": 1e4,
        "d": -2e-5,
        "e": 0.5,
        "f": "1e",
        "g": "1e-4x",
    }
    cfg = load_config(
        "tiny",
        [
            "update.lr=1e-4",
            "update.grad_clip=1",
            "update.betas=[0.9, 0.95]",
            "eval.seeded=false",
            "loss.clip_ratio_c=3",
        ],
    )
    assert cfg.update.lr == 1e-4 and cfg.update.grad_clip == 1.0 and cfg.update.betas == (0.9, 0.95)
    assert cfg.loss.clip_ratio_c == 3.0 and cfg.eval.seeded is False
    save_config(cfg, tmp_path / "c.yaml")  # a run's config.yaml (betas as a YAML list) loads back
    assert load_saved_config(tmp_path / "c.yaml") == cfg
    text = load_config("tiny", ['model.path="1e5"'])  # quoted: text, and config.yaml keeps it text
    save_config(text, tmp_path / "t.yaml")
    assert load_saved_config(tmp_path / "t.yaml").model.path == "1e5"
    for preset in ("tiny", "countdown", "smollm2"):
        load_config(preset)


# --- leftovers: vLLM weight loads verified; umask respected ----------------------------------------


def test_vllm_load_weights_refuses_a_damaged_checkpoint(tmp_path, tiny_model_dir):
    """VLLMEngine.load_weights goes through checkpoints.verified() like HFEngine's: vLLM is never
    asked to load weights their manifest does not vouch for (no vLLM needed: the engine is a stub)."""
    from thinking_seeds.engine.models import load_model
    from thinking_seeds.engine.vllm_engine import VLLMEngine
    from thinking_seeds.store.checkpoints import CheckpointError, save_checkpoint

    model, tok = load_model(tiny_model_dir)
    ckpt = save_checkpoint(model, tok, tmp_path / "policy", 1)
    weights = ckpt / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))

    calls = []

    class FakeLLM:
        def collective_rpc(self, *a, **k):
            calls.append("reload")

        def apply_model(self, *a, **k):
            calls.append("apply")

        def reset_prefix_cache(self):
            calls.append("reset")

    eng = VLLMEngine.__new__(VLLMEngine)
    eng.llm, eng.loaded_from, eng._tmp = FakeLLM(), None, tmp_path / "views"
    eng.lora_requests = False  # full weights: the swap path (rollout.lora_requests serves adapters instead)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        eng.load_weights(ckpt)
    assert calls == [] and eng.loaded_from is None


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def test_atomic_and_sft_control_files_follow_the_umask(tmp_path, umask_027):
    from thinking_seeds.experiments.sft_control import _write_json_atomic
    from thinking_seeds.store.atomic import atomic_write

    (tmp_path / "plain").write_text("x")
    expected = stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    assert expected == 0o640
    md = atomic_write(tmp_path / "reports" / "report.md", "# r")
    png = atomic_write(tmp_path / "reports" / "a.png", lambda f: f.write(b"\x89PNG"))
    _write_json_atomic(tmp_path / "ctl" / "state.json", {"a": 1})
    for p in (md, png, tmp_path / "ctl" / "state.json"):
        assert stat.S_IMODE(p.stat().st_mode) == expected, p
    assert json.loads((tmp_path / "ctl" / "state.json").read_text()) == {"a": 1}
    assert [p.name for p in (tmp_path / "ctl").iterdir()] == ["state.json"]  # no temp file left


def test_user_data_is_read_once_per_process_until_it_changes(tmp_path, monkeypatch):
    """The CLI, the flow and prepare each check the user's files before writing: one read per file,
    and a file changed since (size or mtime) is read, and refused, again."""
    import os

    from thinking_seeds.data import dataset_file

    reads = []
    real = dataset_file.load_dataset
    monkeypatch.setattr(dataset_file, "load_dataset", lambda p, *a, **k: reads.append(str(p)) or real(p, *a, **k))
    train, val = write(tmp_path / "train.parquet"), write(tmp_path / "val.parquet")
    cfg = load_config("tiny", ["data.source=parquet", f"data.train_path={train}", f"data.val_path={val}"])
    for _ in range(3):
        dataset_file.check_user_data(cfg.data)
    assert sorted(reads) == sorted([str(train), str(val)])
    empty(train)
    os.utime(train, ns=(1, 1))  # another mtime even on a coarse clock
    with pytest.raises(DataError, match=f"{train} has no rows"):
        dataset_file.check_user_data(cfg.data)
    with pytest.raises(DataError, match=f"{train} has no rows"):  # a bad file is never remembered as good
        dataset_file.check_user_data(cfg.data)
