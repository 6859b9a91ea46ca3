"""The comparison experiment without running it: planning and its budget checks, the CLI's refusals,
and the report's mean ± std over seeds on hand-made runs. The tiny end-to-end `ts compare`:
e2e/test_compare.py; the job runner's subprocesses: integration/test_compare_jobs.py."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.experiments.jobs import CompareError
from thinking_seeds.experiments.members import base_point_variant
from thinking_seeds.experiments.run_spec import check_same_budget, plan
from thinking_seeds.experiments.spec import parse_list, parse_sweep
from thinking_seeds.flows.cli import app

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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


def test_a_sweep_that_includes_its_base_point_is_paired_against_it():
    # The same-seed ablation: --sweep advantage.baseline=group,same_seed (group is what the run would
    # have without the sweep), so the report pairs same_seed against group without a --reference.
    shared = ["rollout.continuations_per_seed=2"]
    sweep = {"advantage.baseline": ["group", "same_seed"]}
    markers = [{**s.marker()} for s in plan("tiny", ["thinking_seeds"], [0, 1], shared, sweep, "ss")]
    assert base_point_variant(markers) == "thinking_seeds advantage.baseline=group"
    # Without its base point (only the changed value swept) there is nothing to pair against here.
    only = [
        {**s.marker()}
        for s in plan("tiny", ["thinking_seeds"], [0], shared, {"advantage.baseline": ["same_seed"]}, "s1")
    ]
    assert base_point_variant(only) is None
    # The base point is the preset's value (tiny: pool.size 4), whichever order the sweep lists it in.
    t = [{**s.marker()} for s in plan("tiny", ["thinking_seeds"], [0], [], {"pool.size": ["2", "4"]}, "t")]
    assert load_config("tiny", ["algorithm=thinking_seeds"]).pool.size == 4
    assert base_point_variant(t) == "thinking_seeds pool.size=4"
    # A key both shared and swept has no single base value: refused before any run.
    with pytest.raises(ConfigError, match=r"--set pool.size=\.\.\. and --sweep pool.size=\.\.\. both set pool.size"):
        plan("tiny", ["thinking_seeds"], [0], ["pool.size=2"], {"pool.size": ["2", "4"]}, "t2")


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


def test_plan_text_names_the_seeds_each_method_runs():
    """The start line said "x seeds 0,1,2" for issue #9's command, whose methods all name their own."""
    from thinking_seeds.experiments.spec import ComparisonSpec

    own = ComparisonSpec.of(methods="grpo:0-4,luffy:0-1", seeds="0,1,2")
    assert own.plan_text() == "grpo:0-4, luffy:0-1"
    assert ComparisonSpec.of(methods="grpo,luffy", seeds="5,6").plan_text() == "grpo, luffy x seeds 5,6"
    mixed = ComparisonSpec.of(methods="grpo:0-4,luffy,seq_mix", seeds="7")
    assert mixed.plan_text() == "grpo:0-4, luffy, seq_mix; seeds 7 for luffy, seq_mix"


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
    assert "Generated " in md and ": 4 runs, 2 variants" in md
    # the same runs as the part a comparison of 6 planned runs has so far (a clone of one still running)
    md = write_compare_report(
        "c", tmp_path, tmp_path / "out", command="ts compare --id c", last=3, planned=6
    ).read_text()
    assert "4 of the 6 planned runs have results so far (the comparison is incomplete)" in md
