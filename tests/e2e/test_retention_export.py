"""Checkpoint retention (checkpoint.keep_last) and `ts export` on the random tiny model."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from thinking_seeds.config import load_config
from thinking_seeds.flows.cli import app
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.run_dir import RunDir

SMALL = [
    "rollout.prompts_per_iteration=4",
    "data.train_size=40",
    "data.val_size=8",
    "data.test_size=8",
    "eval.prompts=4",
    "eval.samples=2",
    "eval.every=2",
    "eval.seeded=false",
    "algorithm=grpo",
    "rollout.seeds_per_group=0",
    "checkpoint.every=1",  # every step written: what retention bounds
]


def _du(path):
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    base = tmp_path_factory.mktemp("runs")
    out = {}
    for name, extra in (("all", []), ("kept", ["checkpoint.keep_last=2"])):
        cfg = load_config("tiny", SMALL + ["iterations=4", f"model.path={tiny_model_dir}"] + extra)
        out[name] = train(RunDir.for_run(name, base), cfg)
    return base, out


def test_keep_last_bounds_the_policy_steps_and_resume_redoes_nothing(runs, tiny_model_dir):
    base, r = runs
    steps = lambda run: sorted(int(p.name[5:]) for p in run.policy_root.glob("step_*") if p.is_dir())  # noqa: E731
    assert steps(r["all"]) == [0, 1, 2, 3, 4]
    assert steps(r["kept"]) == [0, 3, 4]  # θ_0, the last two
    assert sorted(p.name for p in r["kept"].policy_root.glob("*.pruned")) == [f"step_{k:06d}.pruned" for k in (1, 2)]
    assert _du(r["kept"].policy_root) < 0.7 * _du(r["all"].policy_root)
    # the pruned steps' updates count as done: a resume writes no manifest again
    before = {p: p.stat().st_mtime_ns for p in (r["kept"].root / "manifests").rglob("*.json")}
    cfg = load_config("tiny", SMALL + ["iterations=4", f"model.path={tiny_model_dir}", "checkpoint.keep_last=2"])
    train(r["kept"], cfg)
    assert {p: p.stat().st_mtime_ns for p in (r["kept"].root / "manifests").rglob("*.json")} == before
    # same weights as the run that kept everything
    wa, wb = load_file(r["all"].policy(4) / "model.safetensors"), load_file(r["kept"].policy(4) / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_export_loads_with_transformers_and_matches_the_policy(runs, tmp_path):
    base, r = runs
    res = CliRunner().invoke(
        app, ["--runs-dir", str(base), "export", "all", "--step", "4", "--out", str(tmp_path / "m")]
    )
    assert res.exit_code == 0, res.output
    out = tmp_path / "m"
    assert not (out / "optimizer.safetensors").exists() and not (out / "manifest.json").exists()
    card = (out / "README.md").read_text()
    assert "policy step 4" in card and "evaluate: eval/accuracy" in card and "algorithm: grpo" in card
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    ref = AutoModelForCausalLM.from_pretrained(r["all"].policy(4), local_files_only=True)
    ids = torch.tensor([tok("Compute 1+2.")["input_ids"]])
    assert torch.equal(model(ids).logits, ref(ids).logits)
    assert tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "x\n"


def test_export_refuses_pruned_steps_and_non_empty_folders(runs, tmp_path):
    base, _ = runs
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for args, msg in (
        (["kept", "--step", "2", "--out", str(tmp_path / "a")], "was pruned by checkpoint.keep_last"),
        (["all", "--step", "4", "--out", str(tmp_path / "full")], "not empty"),
        (["nope", "--out", str(tmp_path / "b")], "no run 'nope'"),
    ):
        res = CliRunner().invoke(app, ["--runs-dir", str(base), "export", *args])
        assert res.exit_code == 2 and msg in res.output, res.output
    assert not (tmp_path / "a").exists()


def test_keep_last_keeps_what_the_pool_and_resume_need(tmp_path, tiny_model_dir):
    """A Thinking Seeds run with LoRA whose pool reaches back further than checkpoint.keep_last: the policy
    steps outside the window go, the pool's snapshots (adapters on θ_0) still write the seeds, and a resume
    redoes nothing."""
    from thinking_seeds.engine.lora import merged_state_dict
    from thinking_seeds.store.checkpoints import verify_checkpoint
    from thinking_seeds.store.parquet_io import read_table

    overrides = SMALL[:-2] + [
        "algorithm=thinking_seeds",
        "rollout.seeds_per_group=4",
        "pool.size=3",
        "pool.snapshot_every=1",
        "model.lora.r=4",
        "model.lora.target_modules=[q_proj, v_proj]",
        "update.launcher=in_process",
        "iterations=4",
        f"model.path={tiny_model_dir}",
        "checkpoint.keep_last=1",
    ]
    cfg = load_config("tiny", overrides)
    run = train(RunDir.for_run("pool", tmp_path), cfg)
    steps = sorted(int(p.name[5:]) for p in run.policy_root.glob("step_*") if p.is_dir())
    assert steps == [0, 3, 4]  # θ_0 (the adapters' base), the last one, the one the last update started from
    pool = sorted(int(p.name[5:]) for p in run.pool_root.glob("step_*") if p.is_dir())
    assert pool == [0, 1, 2, 3]
    for k in (1, 2):  # pruned from policy/, whole in the pool: verified, and its adapters merge onto θ_0
        assert not run.policy(k).exists() and (run.pool_root / f"step_{k:06d}" / "adapter_model.safetensors").is_file()
        verify_checkpoint(run.pool_root / f"step_{k:06d}")
        assert merged_state_dict(run.pool_root / f"step_{k:06d}")
    sources = {r["source_step"] for r in read_table(run.prefixes(3)).to_pylist()}
    assert sources <= {0, 1, 2} and sources & {1, 2}  # seeds of iteration 3 from pruned policy steps
    before = {p: p.stat().st_mtime_ns for p in (run.root / "manifests").rglob("*.json")}
    train(run, cfg)
    assert {p: p.stat().st_mtime_ns for p in (run.root / "manifests").rglob("*.json")} == before
