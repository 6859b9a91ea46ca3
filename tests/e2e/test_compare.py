"""The comparison experiment end to end: a tiny `ts compare` (slow: CI's second step).

The end-to-end case runs `ts compare --no-prefect` (CliRunner) with 2 methods x 1 seed x 2
iterations on the random-weights tiny model: two training subprocesses, the SFT control, the report.
Its numbers are then checked against the metrics Parquet files read directly with pyarrow. The same
finished comparison is then archived (`--archive`) and resumed from a runs folder that no longer
exists, as a later working session would. Planning and the report's arithmetic: unit/test_compare_plan.py.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.helpers.tiny import TINY_OVERRIDES
from thinking_seeds.experiments.members import compare_members
from thinking_seeds.experiments.spec import ComparisonSpec
from thinking_seeds.flows.cli import app
from thinking_seeds.pipeline.checkpoint_eval import FINAL_TEST_STAGE

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CMP = "t"
METHODS = ("grpo", "thinking_seeds")

pytestmark = pytest.mark.slow  # ~75 s: two training subprocesses, the SFT control, an ablation, the archive


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


def _train_seconds(rows: list[dict]) -> float:
    """Training wall time the way the budget counts it: time/* of the training stages, minus the seeds
    parts sampled beside the update (iterations with perf/seeds_ahead = 1; the stage's io stays)."""
    ahead = {r["iteration"] for r in rows if r["name"] == "perf/seeds_ahead" and r["value"] == 1}
    return sum(
        r["value"]
        for r in rows
        if r["name"].startswith("time/")
        and _training(r["stage"])
        and not (r["stage"] == "seeds" and r["iteration"] in ahead and r["name"] != "time/seeds/io")
    )


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
    # the exact command is at the top, as typed: TS_RUNS_DIR (from the environment) and the default
    # preset are not written, so the line reads the same on another machine
    head = f"# Comparison: {CMP}\n\nProduced by:\n\n```\n"
    assert md.startswith(head + "ts compare --methods grpo,thinking_seeds --seeds 0 --set model.path=")
    command = md.split("```")[1]
    assert "--runs-dir" not in command and "--preset" not in command and f"--id {CMP}" in command


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
        secs = _train_seconds(rows)
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
    # item 1's statistics per seeded run, from its rollouts (the archive keeps them as seed_decides.json)
    seeds = md.split("## Does the seed decide? (per seeded run)")[1].split("\n## ")[0]
    assert "### thinking_seeds" in seeds and "### grpo" not in seeds and "\n| s0 | " in seeds


def test_e2e_sft_control(e2e):
    runs, _, _, _ = e2e
    ctl = runs / f"{CMP}-sft_control-s0"
    state = json.loads((ctl / "control.json").read_text())
    # budget = mean training time of the RL runs, measured from their time/* metrics
    rl = [_train_seconds(_metrics(runs / f"{CMP}-{m}-s0")) for m in METHODS]
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
