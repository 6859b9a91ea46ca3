"""The comparison report: every run of a comparison, grouped by method (and sweep point) over seeds.

    write_compare_report("cmp", Path("runs"), Path("docs/results/cmp"), command="ts compare ...")
      -> docs/results/cmp/report.md            tables (mean ± std over seeds) and the plots below
         docs/results/cmp/results.parquet      one row per run with its final metrics
         docs/results/cmp/{accuracy,strategy_b,entropy,effective_entropy,clip_fraction,pass_at_k}.png

The numbers come from compare_data.collect (DuckDB over the runs' files), the claims tables from
claims.py, the plots from compare_plots.py, the tables after the introduction from
compare_sections.py; this module writes the introduction and lays them out. Runs restored from a
committed archive (archive.py) are named as such. Every file is written atomically, the Markdown
last. Never imports prefect.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from thinking_seeds.experiments.claims import claims_markdown
from thinking_seeds.experiments.compare_data import collect, pass_ks, results_table
from thinking_seeds.experiments.compare_plots import plots
from thinking_seeds.experiments.compare_sections import (
    Results,
    baseline,
    budget_section,
    curves_section,
    entropy_section,
    final_test_section,
    paired_section,
    pass_at_k_sections,
    runs_section,
    validation_section,
)
from thinking_seeds.experiments.equal_iterations import (
    equal_iterations_done,
    equal_iterations_lines,
    equal_iterations_plan,
)
from thinking_seeds.experiments.members import archive_record
from thinking_seeds.experiments.planning import COMPUTE_MATCHED
from thinking_seeds.experiments.protocol import load as load_protocol
from thinking_seeds.experiments.protocol import protocol_lines
from thinking_seeds.experiments.run_spec import CONTROL_METHOD
from thinking_seeds.experiments.seed_decides import seed_decides_section
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.parquet_io import write_table_atomic

__all__ = ["write_compare_report"]


def _archived(data: dict[str, Any], runs_dir: Path) -> list[str]:
    """The sentence naming the runs restored from a committed archive (archive.py), one per archive."""
    where: dict[str, list[str]] = defaultdict(list)
    for m in data["members"]:
        rec = archive_record(runs_dir / m["run_id"])
        if rec is not None:
            where[rec.get("archive", "?")].append(m["run_id"])
    return [
        f"{len(ids)} of these runs come from the committed archive `{path}` (finished in an earlier session; "
        f"`ts compare --archive` keeps their result files, not their checkpoints): {', '.join(ids)}."
        for path, ids in where.items()
    ]


def _iterations_by_method(rl: list[dict[str, Any]], configs: dict[str, Any]) -> dict[str, int]:
    """Each RL method's number of iterations (its first run's config)."""
    own: dict[str, int] = {}
    for m in rl:
        n = (configs.get(m["run_id"]) or {}).get("iterations")
        if n is not None:
            own.setdefault(m["method"], int(n))
    return own


def _own_iterations(rl: list[dict[str, Any]], configs: dict[str, Any]) -> str:
    """'grpo 185, thinking_seeds 150' when the methods train different numbers of iterations, else ''."""
    own = _iterations_by_method(rl, configs)
    return ", ".join(f"{method} {n}" for method, n in own.items()) if len(set(own.values())) > 1 else ""


def _equal_iterations(
    compare_id: str, rl: list[dict[str, Any]], data: dict[str, Any], variants: dict[str, list[str]], runs_dir: Path
) -> list[str]:
    """With iterations matched to compute, the method given more of them is also compared at the
    others' count (equal_iterations.py: its earlier checkpoint, tested like a final policy): every
    endpoint, both readings."""
    plan = equal_iterations_plan(_iterations_by_method(rl, data["configs"]))
    if plan is None:
        return []
    longest, step, against = plan
    if not any(m["method"] == longest and equal_iterations_done(runs_dir / m["run_id"], step) for m in rl):
        return [
            f"{longest} at equal iterations (θ_{step}) is not evaluated yet: `python -m "
            f"thinking_seeds.experiments.equal_iterations --id {compare_id} --method {longest} --step {step} "
            f"--against {','.join(against)}`.",
            "",
        ]
    return [*equal_iterations_lines(data, variants, longest, [v for v in variants if v in against]), ""]


def _shared(cfg: dict[str, Any]) -> str:
    r, e = cfg.get("rollout", {}), cfg.get("eval", {})
    d, mdl = cfg.get("data", {}), cfg.get("model", {})
    return (
        f"model `{mdl.get('path')}`, task `{d.get('source')}`, {cfg.get('iterations')} iterations × "
        f"{r.get('prompts_per_iteration')} prompts × {r.get('group_size')} samples per prompt "
        f"(max {r.get('max_new_tokens')} new tokens, T={r.get('temperature')}); evaluation every "
        f"{e.get('every')} iterations on {e.get('prompts')} `{e.get('split')}` prompts × {e.get('samples')} "
        f"samples at T={e.get('temperature')}"
    )


def _excluded_by_base(cfg: dict[str, Any] | None) -> int | None:
    """How many RL-train prompts the base model's warm-up left out (its rebuild command's
    `--rl-train-size N`; None when it left out none, or the base has no warm-up report)."""
    import re

    from thinking_seeds.engine.models import ModelError, resolve_model_path

    path = ((cfg or {}).get("model") or {}).get("path")
    try:
        report = resolve_model_path(path) / "warmup_report.json" if path else None
    except ModelError:
        return None
    if report is None or not report.is_file():
        return None
    found = re.search(r"--rl-train-size\s+(\d+)", json.loads(report.read_text()).get("rebuild") or "")
    return int(found.group(1)) if found else None


def _control_note(members: list[dict[str, Any]], runs_dir: Path, cfg: dict[str, Any] | None) -> list[str]:
    """The paragraph on the SFT control's budget and corpus (nothing without a control that has its state file)."""
    ctl = [m for m in members if m["method"] == CONTROL_METHOD]
    states = [
        json.loads((runs_dir / m["run_id"] / "control.json").read_text())
        for m in ctl
        if (runs_dir / m["run_id"] / "control.json").is_file()
    ]
    if not states:
        return []
    b = statistics.fmean(s.get("budget_seconds", float("nan")) for s in states)
    st = statistics.fmean(s.get("steps", 0) for s in states)
    excluded = _excluded_by_base(cfg)
    corpus = (
        f" The base model's warm-up left out the {excluded} multisets of the RL training split; the control's "
        f"corpus leaves out only validation and test, so it also trains on worked solutions of those {excluded} "
        "RL-train multisets, which the base never saw: it is more supervised data, including the RL runs' "
        "own training prompts, not the warm-up continued on the warm-up's data."
        if excluded
        else ""
    )
    return [
        f"`{CONTROL_METHOD}`: supervised training (the warm-up's own SFT step) from the same base model for the "
        f"mean training time of the RL runs ({b:.1f} s; {st:.0f} SFT steps on average), on fresh worked solutions "
        f"of the task whose prompts are not in the validation or test split, evaluated exactly like the RL runs."
        f"{corpus} Its x axis is compute: step k = k/iterations of that time.",
        "",
    ]


# The day the report's readings below were added (issue: claims that survive a reviewer). A comparison
# registered before it had none of them in its protocol: its report labels them as post-hoc.
REPORTING_REVISED = "2026-12-04T17:00:00+00:00"


def post_hoc_lines(protocol: dict[str, Any] | None) -> list[str]:
    """The paragraph that labels the readings added to the report after the comparison was registered (or
    run, without a protocol): they change what the report shows, not the registered protocol or its hash."""
    when = (protocol or {}).get("registered_at")
    if when is not None and when >= REPORTING_REVISED:
        return []
    what = "the registered protocol and its hash are unchanged" if protocol else "no run was retrained"
    return [
        f"Post-hoc reporting fixes (added {REPORTING_REVISED[:10]}, after the runs; {what}; read from the same "
        "run files): (1) every claims row is also read at equal iterations (its last column), and every "
        "endpoint in the equal-iterations table; (2) a matched-pass@1 row is read at every pair of evaluation "
        "steps whose validation pass@1 agree within one standard error, not at the single closest pair, and "
        "its p is the largest of the pairs' (with no such pair the row is left out, and Holm's family is the "
        "rows shown); (3) a row against θ_0 carries θ_0's own sampling sd; (4) the pass@1 row's one-sided 95% "
        "bounds and detectable difference; (5) the SFT control's description says what its corpus holds.",
        "",
    ]


def write_compare_report(
    compare_id: str,
    runs_dir: Path,
    out_dir: Path,
    command: str | None = None,
    last: int = 10,
    reference: str | None = None,
    planned: int | None = None,
) -> Path:
    """Write report.md, results.parquet and the PNG plots of comparison `compare_id` into `out_dir`.

    `command` (the exact command line that produced it) is quoted at the top. `planned`: how many
    runs (SFT controls included) the comparison plans, so that a report written from some of them
    (a fresh clone's archive of a comparison still running) says it is incomplete. Raises DataError
    when no run of the comparison exists. Returns the Markdown's path.
    """
    runs_dir, out = Path(runs_dir), Path(out_dir)
    data = collect(compare_id, runs_dir, last, reference)
    out.mkdir(parents=True, exist_ok=True)
    variants: dict[str, list[str]] = defaultdict(list)
    for m in data["members"]:
        variants[m.get("variant", m["method"])].append(m["run_id"])
    res = Results(data, dict(variants))
    variants = res.variants
    per_run = data["per_run"]

    done = res.n_done([m["run_id"] for m in data["members"]])
    # A run still training has first evaluations and per-iteration metrics: none of it may enter a
    # table, a paired difference or a curve until the run has finished.
    unfinished = {m["run_id"] for m in data["members"] if not res.n_done([m["run_id"]])}
    for r in unfinished:
        per_run.pop(r, None)
        data["curves"].pop(r, None)

    protocol = load_protocol(out)
    registered = (protocol or {}).get("protocol") or {}
    primary = registered.get("primary_endpoint") or {}
    ts, grpo = primary.get("pair", ["thinking_seeds", "grpo"])
    label = "Primary endpoint" if primary else "First row (no primary endpoint was registered)"
    reading = registered.get("reading", COMPUTE_MATCHED)
    claims = claims_markdown(data, variants, runs_dir, ts=ts, grpo=grpo, primary=label, reading=reading)  # + hard/*
    if ts != "thinking_seeds" and "thinking_seeds" in variants:
        # The paper's default arm beside the primary one: the same rows, but not the registered family.
        claims += "\n\n" + claims_markdown(
            data,
            variants,
            runs_dir,
            ts="thinking_seeds",
            grpo=grpo,
            title=f"The same claims for the paper's default arm (thinking_seeds; exploratory: the registered "
            f"family is the table above, {ts}; Holm within this table)",
            extras=False,
            reading=reading,
        )
    results = results_table(data, compare_id)
    write_table_atomic(results, out / "results.parquet")
    ks = pass_ks(per_run)
    plot_paths = plots(out, data, variants, ks)

    md = [f"# Comparison: {compare_id}", ""]
    if command:
        md += ["Produced by:", "", "```", command, "```", ""]
    seeds = sorted({m.get("seed") for m in data["members"]})
    rl = [m for m in data["members"] if m["method"] != CONTROL_METHOD]
    ref_cfg = data["configs"].get(rl[0]["run_id"]) if rl else None
    n_members = max(len(data["members"]), planned or 0)
    md.append(
        f"Generated {datetime.now(UTC).isoformat(timespec='seconds')} from `{runs_dir.resolve()}`: "
        + (
            f"{n_members} runs"
            if done == n_members
            else f"{done} of the {n_members} planned runs have results so far (the comparison is incomplete)"
        )
        + f", {len(variants)} variants, seeds {', '.join(map(str, seeds))}. "
        "Cells are mean ± std over seeds (sample std; a single seed shows its value)."
    )
    md.append("")
    for line in _archived(data, runs_dir):
        md += [line, ""]
    md += protocol_lines(protocol)
    if claims:  # the fixes are to the claims table and what comes with it; a sweep without one is as it was
        md += [*post_hoc_lines(protocol), claims, ""]
    if ref_cfg:
        own = _own_iterations(rl, data["configs"])
        shared = _shared({**ref_cfg, "iterations": "its own number of"} if own else ref_cfg)
        md.append(f"Shared budget of every run (checked when the comparison was planned): {shared}.")
        if own:
            md.append(
                "Iterations set per method to match compute (`--method-set METHOD:iterations=N`; the other "
                f"budget keys are shared): {own}. The token and time columns below show what each method spent."
            )
        md.append("")
    md += _control_note(data["members"], runs_dir, ref_cfg)
    md += _equal_iterations(compare_id, [m for m in rl if m["run_id"] not in unfinished], data, variants, runs_dir)

    md += final_test_section(res, ks)
    md += paired_section(res, ks)
    if baseline(res) == "grpo" and "seq_mix" in variants and len(variants) > 2:
        md += paired_section(res, ks, against="seq_mix")  # is a gain over GRPO seeding's, or any mixing's?
    md += validation_section(res)
    md += pass_at_k_sections(res, ks)
    md += entropy_section(res, last)
    seed_of = {m["run_id"]: m.get("seed") for m in data["members"]}
    md += seed_decides_section(  # rows named by seed under each variant's heading (run ids name the Runs table)
        {v: {f"s{seed_of[r]}": runs_dir / r for r in ids if r not in unfinished} for v, ids in sorted(variants.items())}
    )
    md += budget_section(res)
    md += curves_section(plot_paths)
    md += runs_section(res, ks)
    md.append(f"SQL over these runs: `ts sql \"SELECT * FROM metrics WHERE run_id LIKE '{compare_id}-%'\"`.")
    text = "\n".join(md).rstrip() + "\n"
    return atomic_write(out / "report.md", lambda f: f.write(text), mode="w")
