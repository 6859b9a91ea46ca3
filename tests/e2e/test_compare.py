"""The comparison experiment: planning and its budget checks, and a tiny end-to-end `ts compare`.

The end-to-end case runs `ts compare --no-prefect` (CliRunner) with 2 methods x 1 seed x 2
iterations on the random-weights tiny model: two training subprocesses, the SFT control, the report.
Its numbers are then checked against the metrics Parquet files read directly with pyarrow. The same
finished comparison is then archived (`--archive`) and resumed from a runs folder that no longer
exists, as a later working session would.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import TINY_OVERRIDES
from typer.testing import CliRunner

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.experiments.jobs import CompareError, Job, raise_on_failures, run_jobs
from thinking_seeds.experiments.members import compare_members
from thinking_seeds.experiments.spec import (
    FINAL_TEST_STAGE,
    ComparisonSpec,
    check_same_budget,
    parse_list,
    parse_sweep,
    plan,
)
from thinking_seeds.flows.cli import app

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CMP = "t"
METHODS = ("grpo", "thinking_seeds")


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------


def test_plan_ids_and_overrides():
    specs = plan("tiny", ["grpo", "thinking_seeds"], [0, 1], ["iterations=3"], None, "cmp")
    assert [s.run_id for s in specs] == ["cmp-grpo-s0", "cmp-grpo-s1", "cmp-thinking_seeds-s0", "cmp-thinking_seeds-s1"]
    s = specs[3]
    assert s.overrides == ["iterations=3", "algorithm=thinking_seeds", "seed=1"]
    cfg = s.config()
    assert (cfg.algorithm, cfg.seed, cfg.iterations) == ("thinking_seeds", 1, 3)
    assert s.marker()["variant"] == "thinking_seeds" and s.marker()["compare_id"] == "cmp"


def test_plan_sweep_is_a_cartesian_product():
    specs = plan(
        "tiny", ["thinking_seeds"], [0, 1], [], {"prefix.ratio_max": [0.4, 0.5], "pool.size": ["1", "4"]}, "abl"
    )
    assert len(specs) == 2 * 2 * 2
    ids = [s.run_id for s in specs]
    assert ids[0] == "abl-thinking_seeds-prefix.ratio_max=0.4-pool.size=1-s0"
    assert "abl-thinking_seeds-prefix.ratio_max=0.5-pool.size=4-s1" in ids
    assert len(set(ids)) == len(ids)
    s = next(s for s in specs if s.run_id.endswith("ratio_max=0.5-pool.size=4-s1"))
    assert s.overrides == ["prefix.ratio_max=0.5", "pool.size=4", "algorithm=thinking_seeds", "seed=1"]
    assert s.variant == "thinking_seeds prefix.ratio_max=0.5 pool.size=4"
    cfg = s.config()
    assert (cfg.prefix.ratio_max, cfg.pool.size) == (0.5, 4)
    # every ablation axis of the issue goes through the same planner
    sweep = parse_sweep(
        [
            "prefix.ratio_min=0.1,0.3",
            "pool.pick=uniform,recent",
            "prefix.loss=clip,capped",
            "rollout.seeds_per_group=2,4",
        ]
    )
    assert len(plan("tiny", ["thinking_seeds"], [0], [], sweep, "abl2")) == 16


def test_plan_one_at_a_time_varies_one_key_from_the_base():
    sweep = {"prefix.ratio_max": ["0.4", "0.8"], "pool.size": ["1"], "prefix.loss": ["shaped", "capped"]}
    specs = plan("tiny", ["thinking_seeds"], [0, 1], [], sweep, "abl", one_at_a_time=True)
    assert len(specs) == (2 + 1 + 2) * 2  # not 2 x 1 x 2 combinations
    assert specs[0].run_id == "abl-thinking_seeds-prefix.ratio_max=0.4-s0"
    base = load_config("tiny", ["algorithm=thinking_seeds"])
    for s in specs:
        ((key, value),) = s.sweep
        cfg = s.config()
        assert str(_get(cfg, key)) == value
        for other in sweep.keys() - {key}:  # every other swept key keeps the base value
            assert _get(cfg, other) == _get(base, other)


def _get(cfg, dotted):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def test_mismatched_budgets_are_rejected():
    # A sweep over samples per prompt would give runs different budgets.
    with pytest.raises(ConfigError, match=r"(?s)must share .*rollout.group_size=8 but .* has 6"):
        plan("tiny", ["grpo", "thinking_seeds"], [0], [], {"rollout.group_size": [6, 8]}, "x")
    with pytest.raises(ConfigError, match="iterations"):
        plan("tiny", ["grpo"], [0], [], {"iterations": [2, 4]}, "x")
    # The check itself, on configs that differ in the task and the prompts per iteration.
    a = load_config("tiny", ["algorithm=grpo"])
    b = load_config("tiny", ["algorithm=thinking_seeds", "data.train_size=500", "rollout.prompts_per_iteration=8"])
    with pytest.raises(ConfigError) as e:
        check_same_budget({"a": a, "b": b})
    assert "b has data.train_size=500 but a has 2000" in str(e.value)
    assert "b has rollout.prompts_per_iteration=8 but a has 16" in str(e.value)
    check_same_budget(
        {"a": a, "c": load_config("tiny", ["algorithm=seq_mix", "pool.size=2"])}
    )  # method settings may differ


def test_plan_refuses_bad_input():
    with pytest.raises(ConfigError, match="unknown method"):
        plan("tiny", ["grpo", "nope"], [0])
    with pytest.raises(ConfigError, match="twice"):
        plan("tiny", ["grpo"], [0, 0])
    with pytest.raises(ConfigError, match="sets seed per run"):
        plan("tiny", ["grpo"], [0], ["seed=3"])
    with pytest.raises(ConfigError, match="--methods"):
        plan("tiny", ["grpo"], [0], [], {"algorithm": ["grpo", "luffy"]})
    with pytest.raises(ConfigError, match="plain name"):
        plan("tiny", ["grpo"], [0], compare_id="a/b")
    with pytest.raises(ConfigError, match="plain directory name"):
        plan("tiny", ["grpo"], [0], [], {"model.path": ["/x/y"]})
    # a sweep value the method's own checks refuse names the run
    with pytest.raises(ConfigError, match="run x-grpo-rollout.seeds_per_group=2-s0"):
        plan("tiny", ["grpo"], [0], [], {"rollout.seeds_per_group": [2]}, "x")
    with pytest.raises(ConfigError, match="given twice"):
        parse_sweep(["pool.size=1", "pool.size=2"])
    with pytest.raises(ConfigError, match="empty item"):
        parse_list("grpo,,luffy", "--methods")


def test_plan_per_method_seeds_the_countdown_comparison():
    """Issue #9's comparison: 5 + 5 + 3 + 2 + 2 runs on one budget, every method valid on countdown."""
    methods = ["grpo:0-4", "thinking_seeds:0-4", "seq_mix:0-2", "luffy:0-1", "prefix_context:0-1"]
    specs = plan("countdown", methods, [0], [], None, "cd")
    seeds = {m: sorted(s.seed for s in specs if s.method == m) for m in {s.method for s in specs}}
    assert seeds == {
        "grpo": [0, 1, 2, 3, 4],
        "thinking_seeds": [0, 1, 2, 3, 4],
        "seq_mix": [0, 1, 2],
        "luffy": [0, 1],
        "prefix_context": [0, 1],
    }
    assert [s.method for s in specs[:2]] == ["grpo", "grpo"]  # the plan keeps the method order
    cfg = next(s for s in specs if s.method == "thinking_seeds").config()
    assert (cfg.data.source, cfg.reward.backend, cfg.reward.partial_credit) == ("countdown", "reasoning_gym", False)
    assert (cfg.update.mini_batches, cfg.pool.snapshot_every, cfg.prefix.cut) == (4, 20, "line")
    assert plan("tiny", ["grpo:3", "luffy"], [7])[0].seed == 3  # a single seed; luffy falls back to --seeds
    with pytest.raises(ConfigError, match="range like"):
        plan("tiny", ["grpo:a-b"], [0])
    with pytest.raises(ConfigError, match="range is empty"):
        plan("tiny", ["grpo:3-1"], [0])
    with pytest.raises(ConfigError, match="twice"):
        plan("tiny", ["grpo:0-1", "grpo:2-3"], [0])


# ---------------------------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------------------------


def _metrics(run_root: Path) -> list[dict]:
    rows = []
    for f in sorted((run_root / "metrics").glob("iteration=*/*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


def _training(stage: str) -> bool:
    """Stages whose time counts as training (every evaluation is left out of the budget)."""
    return not stage.startswith("evaluate") and stage != FINAL_TEST_STAGE


@pytest.fixture(scope="module")
def e2e(tmp_path_factory, tiny_model_dir):
    base = tmp_path_factory.mktemp("compare")
    runs, out = base / "runs", base / "results"
    args = [
        "compare",
        "--methods",
        ",".join(METHODS),
        "--seeds",
        "0",
        "--id",
        CMP,
        "--out",
        str(out),
        "--parallel",
        "2",
        "--no-prefect",
        "--control-corpus",
        "300",
        "--set",
        f"model.path={tiny_model_dir}",
    ]
    for o in TINY_OVERRIDES + ["loss.entropy_coeff=0.01", "update.lr=1e-3"]:
        args += ["--set", o]
    r = runner.invoke(app, args, env={"TS_RUNS_DIR": str(runs), "COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return runs, out / CMP, args, r


def test_e2e_runs_and_markers(e2e):
    runs, _, _, r = e2e
    members = {m["run_id"]: m for m in compare_members(CMP, runs)}
    assert set(members) == {f"{CMP}-grpo-s0", f"{CMP}-thinking_seeds-s0", f"{CMP}-sft_control-s0"}
    ctl = members[f"{CMP}-sft_control-s0"]
    assert ctl["method"] == "sft_control" and "algorithm=grpo" in ctl["overrides"]  # its config: the on-policy overlay
    for rid in members:
        assert (runs / rid / "train.log").read_text().count("=== ") == 1
    assert "done" in (runs / f"{CMP}-grpo-s0" / "train.log").read_text()


def test_e2e_methods_saw_the_same_prompts(e2e):
    runs, _, _, _ = e2e
    for k in range(2):
        prompts = [
            sorted(
                set(
                    pq.read_table(runs / f"{CMP}-{m}-s0" / "rollouts" / f"iteration={k}" / "rollouts.parquet")
                    .column("prompt_id")
                    .to_pylist()
                )
            )
            for m in METHODS
        ]
        assert prompts[0] == prompts[1] and len(prompts[0]) == 4


def test_e2e_report_files(e2e):
    _, out, _, _ = e2e
    md = (out / "report.md").read_text()
    for stem in ("accuracy", "strategy_b", "entropy", "clip_fraction", "pass_at_k"):
        assert (out / f"{stem}.png").read_bytes().startswith(PNG_MAGIC), stem
        assert f"]({stem}.png)" in md
    # The random model earns no reward, so no token carries gradient: effective entropy is undefined
    # (NaN) and its plot says so instead of drawing the plain entropy again.
    assert not (out / "effective_entropy.png").exists()
    assert "Effective entropy by population (actor/effective_entropy)\n\n_no data yet_" in md
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left by atomic writes
    # the exact command is at the top
    assert md.startswith(f"# Comparison: {CMP}\n\nProduced by:\n\n```\nts --runs-dir ")
    assert "compare --preset tiny --methods grpo,thinking_seeds --seeds 0 --set model.path=" in md


def _report(out: Path) -> tuple[dict[str, dict], str]:
    """results.parquet by run id, and report.md, of a comparison's report folder."""
    return {r["run_id"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}, (out / "report.md").read_text()


def test_e2e_report_numbers_equal_the_metrics(e2e):
    runs, out, _, _ = e2e
    res, md = _report(out)
    for method in METHODS + ("sft_control",):
        rid = f"{CMP}-{method}-s0"
        rows = _metrics(runs / rid)
        ev = [r for r in rows if r["stage"] == "evaluate"]
        final = max(r["iteration"] for r in ev if r["name"] == "eval/accuracy")
        assert final == 2
        got = res[rid]
        assert got["method"] == method and got["seed"] == 0 and got["final_step"] == final
        for name in ("eval/accuracy", "eval/pass@1", "eval/pass@4", "eval/strategy_b", "eval_seeded/pass@4"):
            (want,) = [r["value"] for r in ev if r["iteration"] == final and r["name"] == name]
            assert got[name] == pytest.approx(want, abs=1e-12), (rid, name)
        secs = sum(r["value"] for r in rows if r["name"].startswith("time/") and _training(r["stage"]))
        assert got["budget/train_seconds"] == pytest.approx(secs)
        # the run's row of the Markdown "Runs" table shows the same numbers
        (line,) = [ln for ln in md.splitlines() if ln.startswith(f"| {rid} |")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[3] == str(final)
        assert cells[4] == f"{got['eval/accuracy']:.4f}" and cells[8] == f"{got['eval/strategy_b']:.4f}"
        assert cells[10] == f"{secs:.4f}"
        if method == "sft_control":
            assert got["actor/entropy/all"] is None and got["budget/generated_tokens"] is None
            continue
        tokens = sum(r["value"] for r in rows if r["name"] == "rollout/generated_tokens")
        assert got["budget/generated_tokens"] == tokens > 0
        ent = [r["value"] for r in rows if r["name"] == "actor/entropy/all"]
        assert len(ent) == 2 and got["actor/entropy/all"] == pytest.approx(statistics.fmean(ent))  # last 3 iterations
        assert cells[9] == f"{statistics.fmean(ent):.4f}"
        (budget,) = [ln for ln in md.split("## Budget")[1].splitlines() if ln.startswith(f"| {method} |")]
        assert f"| {tokens:,.0f} |" in budget
    ts = pq.read_table(runs / f"{CMP}-thinking_seeds-s0" / "corpus" / "prefixes" / "iteration=1" / "prefixes.parquet")
    assert res[f"{CMP}-thinking_seeds-s0"]["budget/seed_draft_tokens"] >= sum(ts.column("draft_len").to_pylist())
    # Prefix population only for the seeded method
    assert res[f"{CMP}-grpo-s0"]["actor/entropy/prefix"] is None
    assert res[f"{CMP}-thinking_seeds-s0"]["actor/entropy/prefix"] is not None
    assert "| thinking_seeds | prefix |" in md and "| grpo | prefix |" not in md


def test_e2e_sft_control(e2e):
    runs, _, _, _ = e2e
    ctl = runs / f"{CMP}-sft_control-s0"
    state = json.loads((ctl / "control.json").read_text())
    # budget = mean training time of the RL runs, measured from their time/* metrics
    rl = [
        sum(
            r["value"]
            for r in _metrics(runs / f"{CMP}-{m}-s0")
            if r["name"].startswith("time/") and _training(r["stage"])
        )
        for m in METHODS
    ]
    assert state["budget_seconds"] == pytest.approx(statistics.fmean(rl), abs=1e-3)
    assert state["done"] and state["evaluated"] and state["steps"] > 0
    assert state["trained_seconds"] >= state["budget_seconds"]
    rows = _metrics(ctl)
    ev = {(r["iteration"], r["name"]): r["value"] for r in rows if r["stage"] == "evaluate"}
    for step in (0, 2):
        for name in ("eval/accuracy", "eval/pass@1", "eval/pass@4", "eval/strategy_b"):
            assert (step, name) in ev
    assert (2, "eval_seeded/pass@4") in ev  # its own earlier checkpoints seed the explorable-space eval
    assert {r["name"] for r in rows if r["stage"] == "sft"} >= {"sft/loss", "sft/steps", "time/sft/train"}
    # Exactly the RL runs' evaluation: θ_0 is the same model, so step 0 scores identically.
    grpo = {
        (r["iteration"], r["name"]): r["value"] for r in _metrics(runs / f"{CMP}-grpo-s0") if r["stage"] == "evaluate"
    }
    for name in ("eval/accuracy", "eval/mean_response_len", "eval/strategy_a", "eval/strategy_b"):
        assert ev[(0, name)] == grpo[(0, name)]
    # the control's policy is not the base model any more
    assert (ctl / "policy" / "step_000002" / "manifest.json").exists()
    assert ev[(2, "eval/mean_response_len")] != ev[(0, "eval/mean_response_len")]


def test_e2e_final_test_on_the_whole_test_split(e2e):
    """Every final policy (and θ_0 once) evaluated on all test prompts; the report's headline table shows it."""
    runs, out, _, _ = e2e
    res, md = _report(out)
    for method in METHODS + ("sft_control",):
        rid = f"{CMP}-{method}-s0"
        rows = [r for r in _metrics(runs / rid) if r["stage"] == FINAL_TEST_STAGE]
        assert {r["iteration"] for r in rows} == ({0, 2} if method == METHODS[0] else {2}), rid  # θ_0 once
        final = {r["name"]: r["value"] for r in rows if r["iteration"] == 2}
        assert final["eval/prompts"] == 8 == res[rid]["test/prompts"]  # the whole test split (data.test_size=8)
        assert res[rid]["test/accuracy"] == final["eval/accuracy"] and res[rid]["test/pass@4"] == final["eval/pass@4"]
    test_table = md.split("## Final test accuracy")[1].split("##")[0]
    assert "all 8 test prompts" in md
    base = {
        r["name"]: r["value"]
        for r in _metrics(runs / f"{CMP}-grpo-s0")
        if r["stage"] == FINAL_TEST_STAGE and r["iteration"] == 0
    }
    assert f"| θ_0 (base model) | — | {base['eval/accuracy']:.4f} |" in test_table
    assert f"| grpo | 1 | {res[CMP + '-grpo-s0']['test/accuracy']:.4f} |" in test_table


def test_e2e_rerun_skips_everything(e2e):
    runs, out, args, _ = e2e
    before = (out / "results.parquet").read_bytes()
    r = runner.invoke(app, args, env={"TS_RUNS_DIR": str(runs), "COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert r.output.count("already complete") == 3 + 4  # 2 runs + control, their final tests + θ_0
    for m in METHODS + ("sft_control",):
        assert (runs / f"{CMP}-{m}-s0" / "train.log").read_text().count("=== ") == 1  # no process started
    assert (out / "results.parquet").read_bytes() == before


def test_e2e_ablation_reuses_the_reference_runs(e2e, tiny_model_dir):
    """An ablation with --reference: the base point comes from comparison CMP, only the sweep point trains."""
    runs, out, args, _ = e2e
    base = args[args.index("--set") :]  # the same --set budget as the reference comparison
    abl = [
        "compare",
        "--methods",
        "thinking_seeds",
        "--seeds",
        "0",
        "--id",
        "abl",
        "--out",
        str(out.parent),
        "--no-prefect",
        "--no-control",
        "--sweep",
        "pool.pick=recent,oldest",
        "--one-at-a-time",
        "--reference",
        CMP,
        *base,
    ]
    r = runner.invoke(app, abl, env={"TS_RUNS_DIR": str(runs), "COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert sorted(m["run_id"] for m in compare_members("abl", runs)) == [
        "abl-thinking_seeds-pool.pick=oldest-s0",
        "abl-thinking_seeds-pool.pick=recent-s0",
    ]
    assert (runs / f"{CMP}-thinking_seeds-s0" / "train.log").read_text().count("=== ") == 1  # not trained again
    md = (out.parent / "abl" / "report.md").read_text()
    assert "--one-at-a-time --reference t" in md
    table = md.split("## Final in-training evaluation")[1].split("##")[0]
    variants = [ln.split("|")[1].strip() for ln in table.splitlines() if ln.startswith("| thinking_seeds")]
    assert variants == [
        "thinking_seeds pool.pick=uniform [t]",
        "thinking_seeds pool.pick=oldest",
        "thinking_seeds pool.pick=recent",
    ]
    res = {r["run_id"]: r for r in pq.read_table(out.parent / "abl" / "results.parquet").to_pylist()}
    ref = res[f"{CMP}-thinking_seeds-s0"]
    assert ref["compare_id"] == CMP and res["abl-thinking_seeds-pool.pick=recent-s0"]["compare_id"] == "abl"
    want = [
        r["value"]
        for r in _metrics(runs / f"{CMP}-thinking_seeds-s0")
        if r["name"] == "eval/accuracy" and r["iteration"] == 2 and r["stage"] == "evaluate"
    ]
    assert [ref["eval/accuracy"]] == want and ref["test/accuracy"] is not None
    # A reference on another budget, or one without the method, is refused before anything trains.
    r = runner.invoke(
        app, [*abl, "--set", "eval.samples=8", "--id", "abl2"], env={"TS_RUNS_DIR": str(runs), "COLUMNS": "200"}
    )
    assert r.exit_code == 2 and "must share" in r.output and "eval.samples" in r.output, r.output
    r = runner.invoke(
        app, [*abl, "--reference", "nope", "--id", "abl3"], env={"TS_RUNS_DIR": str(runs), "COLUMNS": "200"}
    )
    assert r.exit_code == 2 and "--reference nope" in r.output
    assert not [p for p in runs.iterdir() if p.name.startswith(("abl2", "abl3"))]


def test_cli_compare_errors(tmp_path):
    env = {"TS_RUNS_DIR": str(tmp_path)}
    r = runner.invoke(
        app,
        ["compare", "--methods", "grpo,thinking_seeds", "--sweep", "rollout.group_size=4,8", "--no-prefect"],
        env=env,
    )
    assert r.exit_code == 2 and "must share" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["compare", "--methods", "grpo,nope", "--no-prefect"], env=env)
    assert r.exit_code == 2 and "unknown method(s) nope" in r.output
    r = runner.invoke(app, ["compare", "--seeds", "0,x", "--no-prefect"], env=env)
    assert r.exit_code == 2
    assert not list(tmp_path.iterdir())  # nothing started


def test_compare_flow_resumes_the_comparison(e2e, tiny_model_dir, monkeypatch, tmp_path):
    """The Prefect flow over the finished comparison, its one parameter the ComparisonSpec: every run
    and control is skipped, each is archived (archive=True), the report rewritten."""
    from thinking_seeds.flows.compare import compare_flow

    runs, _, _, _ = e2e
    monkeypatch.setenv("TS_RUNS_DIR", str(runs))
    overrides = [f"model.path={tiny_model_dir}", *TINY_OVERRIDES, "loss.entropy_coeff=0.01", "update.lr=1e-3"]
    path = compare_flow(
        ComparisonSpec(
            preset="tiny",
            methods=list(METHODS),
            seeds=[0],
            overrides=overrides,
            compare_id=CMP,
            parallel=2,
            out_dir=str(tmp_path),
            command="flow-command",
            control_corpus_size=300,
            archive=True,
        )
    )
    assert path == str(tmp_path / CMP / "report.md")
    assert "```\nflow-command\n```" in Path(path).read_text()
    for m in METHODS + ("sft_control",):
        assert (runs / f"{CMP}-{m}-s0" / "train.log").read_text().count("=== ") == 1
        assert (tmp_path / CMP / "runs" / f"{CMP}-{m}-s0" / "archive.json").is_file()


# ---------------------------------------------------------------------------------------------
# the archive: a comparison resumed by a later session, whose runs/ folder is gone
# ---------------------------------------------------------------------------------------------


def _ts(args: list[str], runs: Path):
    r = runner.invoke(app, args, env={"TS_RUNS_DIR": str(runs), "COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r


def _same_text(md: str) -> str:
    """report.md without what differs between two writings of the same data: the time, the archive line."""
    md = re.sub(r"Generated \S+ from", "Generated from", md)
    return re.sub(r"\d+ of these runs come from the committed archive [^\n]*\n\n", "", md)


@pytest.fixture(scope="module")
def archived(e2e, tmp_path_factory):
    """Session 1: the finished comparison, run again with --archive (nothing trains, every run is
    archived into OUT/t/runs/). Returns (the command, its runs folder, the report folder)."""
    runs0, _, args, _ = e2e
    base = tmp_path_factory.mktemp("archive")
    runs, out = base / "runs", base / "results"
    shutil.copytree(runs0, runs, symlinks=True)
    i = args.index("--out")
    args = [*args[:i], "--out", str(out), *args[i + 2 :], "--archive"]
    r = _ts(args, runs)
    assert r.output.count("already complete") == 3 + 4
    return args, runs, out / CMP


def test_archive_holds_the_small_files_of_every_run(archived):
    _, runs, out = archived
    ids = {f"{CMP}-{m}-s0" for m in (*METHODS, "sft_control")}
    assert {p.name for p in (out / "runs").iterdir()} == ids  # no temp folders left
    for rid in ids:
        root = out / "runs" / rid
        files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
        assert {
            "archive.json",
            "compare.json",
            "config.yaml",
            "metrics/iteration=all/metrics.parquet",
            "evals/final-test/step_000002.parquet",
        } <= files, rid
        assert not [f for f in files if f.split("/")[0] in ("policy", "checkpoints", "rollouts", "manifests", "data")]
        rec = json.loads((root / "archive.json").read_text())
        assert rec["final_test"] and rec["files"] == {f: (root / f).stat().st_size for f in files - {"archive.json"}}
        # every metrics row of the run, in one table
        live = _metrics(runs / rid)
        assert sorted(map(str, pq.read_table(root / "metrics/iteration=all/metrics.parquet").to_pylist())) == sorted(
            map(str, live)
        )
    assert (out / "runs" / f"{CMP}-grpo-s0" / "evals/final-test/step_000000.parquet").is_file()  # θ_0, once
    assert "control.json" in {p.name for p in (out / "runs" / f"{CMP}-sft_control-s0").iterdir()}
    prefixes = pq.read_table(
        out / "runs" / f"{CMP}-thinking_seeds-s0" / "corpus/prefixes/iteration=all/prefixes.parquet"
    )
    assert "prefix_token_ids" not in prefixes.column_names and prefixes.num_rows > 0
    assert "come from the committed archive" not in (out / "report.md").read_text()  # live runs, this time


def test_archive_resumes_without_training_and_reports_the_same(archived):
    """Session 2: runs/ is gone; the same command restores the archived runs, trains and evaluates
    nothing, and writes the same report (results.parquet byte for byte)."""
    args, runs, out = archived
    before_md, before = (out / "report.md").read_text(), (out / "results.parquet").read_bytes()
    shutil.rmtree(runs)
    r = _ts(args, runs)
    assert r.output.count("already complete") == 3 + 4  # 2 runs + control, their final tests + θ_0
    assert not list(runs.glob("*/policy")) and not list(runs.glob("*/*.log"))  # no process ran
    assert (out / "results.parquet").read_bytes() == before
    md = (out / "report.md").read_text()
    assert _same_text(md) == _same_text(before_md)
    assert f"3 of these runs come from the committed archive `{out / 'runs'}`" in md


def test_archive_matches_only_the_same_config(archived, tiny_model_dir):
    """A changed config (same run ids) does not take the archived runs, and drops restored copies."""
    from thinking_seeds.experiments.compare import prepare
    from thinking_seeds.experiments.members import is_complete

    args, _, out = archived
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    runs = out.parent / "fresh-runs"

    def spec(extra: list[str]) -> ComparisonSpec:
        return ComparisonSpec.of(
            compare_id=CMP,
            methods=list(METHODS),
            seeds=[0],
            overrides=sets + extra,
            out_dir=str(out.parent),
            control_corpus_size=300,
        )

    specs = prepare(spec([]), runs)
    assert sorted(p.name for p in runs.iterdir()) == sorted(f"{CMP}-{m}-s0" for m in (*METHODS, "sft_control"))
    assert all(is_complete(s, runs) for s in specs)
    changed = prepare(spec(["update.lr=2e-3"]), runs)
    assert [s.run_id for s in changed] == [s.run_id for s in specs]
    assert not list(runs.iterdir())  # the stale restored copies are gone: these runs train afresh
    assert not any(is_complete(s, runs) for s in changed)


def test_run_jobs_reports_failures_and_keeps_going(tmp_path):
    ok = [sys.executable, "-c", "print('fine')"]
    bad = [sys.executable, "-c", "import sys; print('no Hugging Face checkpoint at /x'); sys.exit(3)"]
    jobs = [
        Job("a", ok, tmp_path / "a" / "train.log"),
        Job("b", bad, tmp_path / "b" / "train.log"),
        Job("c", ok, tmp_path / "c" / "train.log"),
        Job("d", ok, tmp_path / "d" / "train.log", done=True),
    ]
    res = run_jobs(jobs, tmp_path, parallel=2, poll=0.05)
    assert [(r.run_id, r.status, r.returncode) for r in res] == [
        ("a", "done", 0),
        ("b", "failed", 3),
        ("c", "done", 0),
        ("d", "skipped", 0),
    ]
    assert not (tmp_path / "d").exists()  # a complete job starts no process
    assert "fine" in (tmp_path / "c" / "train.log").read_text()
    with pytest.raises(CompareError) as e:
        raise_on_failures(res)
    assert "1 of 4 runs failed" in str(e.value) and str(tmp_path / "b" / "train.log") in str(e.value)
    assert "no Hugging Face checkpoint" in str(e.value)  # the log's tail names the cause


def test_cli_compare_failure_is_one_error_line_and_exit_2(monkeypatch, tmp_path):
    import thinking_seeds.experiments.compare

    def fail(*args, **kwargs):
        raise CompareError(
            "1 of 1 runs failed; rerun the same command to resume them.\n\n"
            "x-grpo-s0 (exit 3), log runs/x-grpo-s0/train.log:\nline one\nline two"
        )

    monkeypatch.setattr(thinking_seeds.experiments.compare, "run_comparison", fail)
    r = runner.invoke(
        app, ["compare", "--methods", "grpo", "--seeds", "0", "--no-prefect"], env={"TS_RUNS_DIR": str(tmp_path)}
    )
    assert r.exit_code == 2 and "Traceback" not in r.output  # the same exit code as every user error
    first, *details = r.stderr.strip().splitlines()
    assert first == "error: 1 of 1 runs failed; rerun the same command to resume them."
    assert details[-2:] == ["line one", "line two"]  # the log's tail, verbatim


def test_report_mean_and_std_over_seeds(tmp_path):
    """Hand-made runs (2 variants x 2 seeds): every cell is the mean ± sample std of known numbers."""
    from thinking_seeds.experiments.compare_report import write_compare_report
    from thinking_seeds.experiments.members import write_marker
    from thinking_seeds.store.run_dir import RunDir

    acc = {("grpo", 0): 0.2, ("grpo", 1): 0.4, ("thinking_seeds", 0): 0.5, ("thinking_seeds", 1): 0.6}
    for (method, seed), a in acc.items():
        run = RunDir.for_run(f"c-{method}-s{seed}", tmp_path)
        write_marker(run.root, {"compare_id": "c", "method": method, "seed": seed, "variant": method, "sweep": {}})
        run.write_metrics(0, "evaluate", {"eval/accuracy": 0.1, "eval/pass@1": 0.1})
        run.write_metrics(
            4,
            "evaluate",
            {
                "eval/accuracy": a,
                "eval/pass@1": a,
                "eval/pass@2": a + 0.1,
                "eval/strategy_b": seed / 10,
                "eval_seeded/pass@2": a + 0.2,
            },
        )
        for k in range(4):  # entropy 2 - 0.1 k: the first 3 average to 1.9, the last 3 to 1.8
            run.write_metrics(
                k,
                "update",
                {
                    "actor/entropy/all": 2.0 - 0.1 * k,
                    "actor/pg_clipfrac/on_policy": 0.01 * k,
                    "time/update/update_total": 1.0,
                },
            )
            run.write_metrics(
                k, "continuation", {"rollout/generated_tokens": 100.0 + seed, "time/continuation/generation": 0.5}
            )
    write_marker(
        tmp_path / "other-grpo-s0", {"compare_id": "other", "method": "grpo", "seed": 0}
    )  # not this comparison
    path = write_compare_report("c", tmp_path, tmp_path / "out", command="ts compare --id c", last=3)
    md = path.read_text()
    assert "| grpo | 2 | 4 | 0.3000 ± 0.1414 | 0.0500 ± 0.0707 |" in md
    assert "| thinking_seeds | 2 | 4 | 0.5500 ± 0.0707 |" in md
    assert "| grpo | 0.3000 ± 0.1414 | 0.4000 ± 0.1414 |" in md  # plain pass@1, pass@2
    assert "| thinking_seeds | — | 0.7500 ± 0.0707 |" in md.split("seeded sampling")[1]  # seeded pass@2 only
    assert "| grpo | all | 1.9000 ± 0.0000 | 1.8000 ± 0.0000 |" in md  # entropy over the first and the last 3
    assert "| grpo | on_policy | — | — | — | — | 0.0200 ± 0.0000 | — |" in md
    assert "| grpo | 4 | 6.0 ± 0.0 | 402 ± 3 | — | 402 ± 3 | — |" in md  # budget: 4 x (100 + seed); 4 x 1.5 s
    # paired by seed against grpo: 0.5 - 0.2 and 0.6 - 0.4; strategy b equal at each seed
    paired = md.split("## Paired differences against `grpo`")[1].split("##")[0]
    # with the 95% t-interval over 2 seeds: 0.25 ± 12.706 x 0.0707 / sqrt(2)
    assert (
        "| thinking_seeds | +0.2500 ± 0.0707 [-0.3853, +0.8853] (s0: +0.300, s1: +0.200) | "
        "+0.0000 ± 0.0000 [+0.0000, +0.0000] (s0: +0.000, s1: +0.000) |"
    ) in paired
    res = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    assert sorted(r["run_id"] for r in res) == ["c-grpo-s0", "c-grpo-s1", "c-thinking_seeds-s0", "c-thinking_seeds-s1"]
    r = next(r for r in res if r["run_id"] == "c-grpo-s1")
    assert (r["final_step"], r["eval/accuracy"], r["actor/entropy/all"], r["budget/generated_tokens"]) == (
        4,
        0.4,
        pytest.approx(1.8),
        404,
    )
    assert "eval/pass@2" in r and "eval/pass@4" not in r  # the k that were evaluated
    assert (tmp_path / "out" / "accuracy.png").read_bytes().startswith(PNG_MAGIC)
