"""Per-method settings of a comparison (`ts compare --method-set METHOD:KEY=VALUE`) and the selection
runs' own evaluation (`--select-set eval.KEY=VALUE`): planned runs only, no training."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from thinking_seeds.config import ConfigError
from thinking_seeds.experiments.compare_report import _own_iterations
from thinking_seeds.experiments.protocol import protocol_of
from thinking_seeds.experiments.run_spec import check_same_budget, compute_matched, plan
from thinking_seeds.experiments.selection import selection_record, selection_specs
from thinking_seeds.experiments.sft_control import control_config
from thinking_seeds.experiments.spec import ComparisonSpec
from thinking_seeds.flows.cli import app

runner = CliRunner()


def _spec(**kw):
    fields = {"compare_id": "ms", "methods": "grpo,thinking_seeds", "seeds": "0,1", "overrides": ["iterations=4"]}
    return ComparisonSpec.of(**(fields | kw))


def test_method_set_gives_one_method_its_own_settings_and_iterations():
    spec = _spec(method_overrides=["grpo:iterations=5", "thinking_seeds:prefix.ratio_of=draft"])
    assert spec.method_overrides == {"grpo": ["iterations=5"], "thinking_seeds": ["prefix.ratio_of=draft"]}
    cfgs = {s.run_id: s.config() for s in spec.runs()}  # the shared-budget check lets iterations differ
    assert {r: (c.iterations, c.prefix.ratio_of) for r, c in cfgs.items()} == {
        "ms-grpo-s0": (5, "budget"),
        "ms-grpo-s1": (5, "budget"),
        "ms-thinking_seeds-s0": (4, "draft"),
        "ms-thinking_seeds-s1": (4, "draft"),
    }  # run ids do not carry the setting; the config hash does
    assert compute_matched(spec.runs()) == {"iterations"}
    # the protocol records each method's settings, so a change later is a changed protocol
    methods = protocol_of(spec, spec.runs())["protocol"]["methods"]
    assert "iterations=5" in methods["grpo"]["overrides"]
    assert "prefix.ratio_of=draft" in methods["thinking_seeds"]["overrides"]
    # the SFT control keeps the shared iterations; its budget check accepts the compute match
    ctrl = control_config("tiny", ("iterations=4",), 0)
    check_same_budget({"a": cfgs["ms-grpo-s0"], "ctrl": ctrl}, compute_matched(spec.runs()))
    with pytest.raises(ConfigError, match="iterations"):  # without the exemption it is a budget mismatch
        check_same_budget({"a": cfgs["ms-grpo-s0"], "ctrl": ctrl})


def test_without_method_set_iterations_still_must_match():
    with pytest.raises(ConfigError, match="must share"):
        plan("tiny", ["grpo"], [0], [], {"iterations": ["4", "5"]}, "x")


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["grpo:rollout.group_size=4"], "budget key"),
        (["grpo:eval.samples=4"], "budget key"),
        (["luffy:update.lr=1e-3"], "luffy is not compared"),
        (["grpo:seed=3"], "per run"),
        (["grpo:iterations=5", "grpo:iterations=6"], "given twice"),
        (["thinking_seeds:pool.size=2"], "both set it"),  # also --sweep pool.size
        (["grpo-iterations=5"], "METHOD:section.key=value"),
        (["grpo:iterations"], "METHOD:section.key=value"),
    ],
)
def test_method_set_refusals(items, message):
    with pytest.raises(ConfigError, match=message):
        ComparisonSpec.of(methods="grpo,thinking_seeds", sweep=["pool.size=1,4"], method_overrides=items)


def test_selection_runs_carry_method_settings_and_their_own_evaluation_only():
    spec = _spec(
        method_overrides=["grpo:iterations=5"],
        select=["lr=1e-4,3e-4"],
        select_seeds="0",
        select_overrides=["eval.every=1000"],
        overrides=["iterations=4", "data.val_size=128"],
    )
    sel = {s.run_id: s.config() for s in selection_specs(spec)}
    assert {r: (c.iterations, c.eval.every) for r, c in sel.items()} == {
        "ms-select-grpo-update.lr=1e-4-s0": (5, 1000),
        "ms-select-grpo-update.lr=3e-4-s0": (5, 1000),
        "ms-select-thinking_seeds-update.lr=1e-4-s0": (4, 1000),
        "ms-select-thinking_seeds-update.lr=3e-4-s0": (4, 1000),
    }
    assert {c.update.lr for r, c in sel.items() if "3e-4" in r} == {3e-4}  # the grid point, not a method override
    assert {s.config().eval.every for s in spec.runs()} == {_spec().runs()[0].config().eval.every} != {1000}
    record = selection_record(spec, {}, {})
    assert record["select_overrides"] == ["eval.every=1000"] and record["method_overrides"] == {
        "grpo": ["iterations=5"]
    }
    # an earlier choice of the selected key (a resumed comparison) does not override the grid
    again = spec.model_copy(update={"method_overrides": {"grpo": ["iterations=5", "update.lr=1e-4"]}})
    assert {s.config().update.lr for s in selection_specs(again) if "3e-4" in s.run_id} == {3e-4}
    with pytest.raises(ConfigError, match="only eval.KEY=VALUE"):
        _spec(select=["lr=1e-4,3e-4"], select_overrides=["update.epochs=2"])


def test_report_names_the_methods_with_their_own_iterations():
    rl = [{"run_id": "a", "method": "grpo"}, {"run_id": "b", "method": "thinking_seeds"}]
    configs = {"a": {"iterations": 185}, "b": {"iterations": 150}}
    assert _own_iterations(rl, configs) == "grpo 185, thinking_seeds 150"
    assert _own_iterations(rl, {"a": {"iterations": 150}, "b": {"iterations": 150}}) == ""


def test_cli_method_set_errors_are_one_line_exit_2(tmp_path):
    env = {"TS_RUNS_DIR": str(tmp_path)}
    base = ["compare", "--methods", "grpo,thinking_seeds", "--no-prefect"]
    r = runner.invoke(app, [*base, "--method-set", "grpo:rollout.group_size=4"], env=env)
    assert r.exit_code == 2 and "budget key" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, [*base, "--method-set", "grpo:update.lr=1e-3", "--select", "lr=1e-4,3e-4"], env=env)
    assert r.exit_code == 2 and "the selection sets update.lr" in r.output
    r = runner.invoke(app, [*base, "--select", "lr=1e-4,3e-4", "--select-set", "update.epochs=2"], env=env)
    assert r.exit_code == 2 and "only eval.KEY=VALUE" in r.output
    assert not list(tmp_path.iterdir())  # nothing started


def test_select_methods_tunes_only_those_and_control_seeds_pick_the_controls():
    spec = _spec(
        methods="grpo:0-3,thinking_seeds:0-3,seq_mix:0-1",
        select=["lr=1e-4,3e-4"],
        select_seeds="5-6",
        select_methods="grpo,thinking_seeds",
        control_seeds="0-1",
        overrides=["iterations=4", "data.val_size=128"],
    )
    assert {(s.method, s.seed) for s in selection_specs(spec)} == {
        (m, k) for m in ("grpo", "thinking_seeds") for k in (5, 6)
    }
    assert spec.control_seed_list(spec.runs()) == [0, 1]
    control = protocol_of(spec, spec.runs())["protocol"]["control"]["runs"]
    assert sorted(control) == ["ms-sft_control-s0", "ms-sft_control-s1"]
    assert _spec(methods="grpo:0-2").control_seed_list(_spec(methods="grpo:0-2").runs()) == [0, 1, 2]
    with pytest.raises(ConfigError, match="not compared"):
        _spec(select=["lr=1e-4,3e-4"], select_methods="luffy")
    with pytest.raises(ConfigError, match="without --select"):
        _spec(select_methods="grpo")


def test_select_follow_gives_an_untuned_sibling_the_value_chosen_for_its_lead():
    from thinking_seeds.experiments.selection import with_selection

    spec = _spec(
        methods="grpo,thinking_seeds,seq_mix",
        select=["lr=1e-4,3e-4"],
        select_methods="grpo,thinking_seeds",
        select_follow="seq_mix=thinking_seeds",
        overrides=["iterations=4", "data.val_size=128"],
    )
    assert {s.method for s in selection_specs(spec)} == {"grpo", "thinking_seeds"}  # seq_mix trains no grid
    done = with_selection(spec, {"grpo": "1e-4", "thinking_seeds": "3e-4"})
    assert {(s.method, s.config().update.lr) for s in done.runs()} == {
        ("grpo", 1e-4),
        ("thinking_seeds", 3e-4),
        ("seq_mix", 3e-4),
    }
    assert selection_record(spec, {}, {})["follow"] == {"seq_mix": "thinking_seeds"}
    for bad in ("grpo=thinking_seeds", "seq_mix=luffy", "seq_mix"):
        with pytest.raises(ConfigError, match="select-follow"):
            _spec(
                methods="grpo,thinking_seeds,seq_mix",
                select=["lr=1e-4,3e-4"],
                select_methods="grpo,thinking_seeds",
                select_follow=bad,
            )


def test_the_method_given_more_iterations_is_also_tested_at_the_others_count(tmp_path):
    """Its θ at the others' iteration count is tested in the same job as its final policy, while the
    checkpoint exists (the report pairs it with their final tests: equal_iterations.py)."""
    from thinking_seeds.experiments.compare import train_jobs

    def flag(job):
        return job.cmd[job.cmd.index("--equal-iterations") + 1] if "--equal-iterations" in job.cmd else None

    spec = _spec(method_overrides=["grpo:iterations=5"])
    jobs = {j.run_id: flag(j) for j in train_jobs(spec.runs(), tmp_path)}
    assert jobs == {"ms-grpo-s0": "4", "ms-grpo-s1": "4", "ms-thinking_seeds-s0": None, "ms-thinking_seeds-s1": None}
    assert not any(flag(j) for j in train_jobs(spec.runs(), tmp_path, final_test=False))  # the selection's runs
    assert not any(flag(j) for j in train_jobs(_spec().runs(), tmp_path))  # the same iterations everywhere
