"""A comparison's archive steps: which run directories it makes, restored before anything runs and
archived as they finish.

    restore_archived(spec, specs, runs_dir)      # archived runs (and the --reference's) whose config hash is planned
    archive_finished(spec, specs, runs_dir)      # every finished run the archive does not hold yet
    hook = archiver(spec, specs, runs_dir)       # run_jobs' on_done: archive each run as its job ends

`_planned` is the one list of the comparison's run directories (its RL runs and SFT controls, each with
its config, its "trained?" check and the steps its final test covers) that both directions read. The
archive's files themselves are archive.py's; this module decides which runs go in and come out.
Apart from compare.py (the steps in the order the flow calls them) because these read and write the
committed archive and start no process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from thinking_seeds.config import RunConfig
from thinking_seeds.experiments.archive import archive_run, restore
from thinking_seeds.experiments.jobs import Job
from thinking_seeds.experiments.members import archive_record, compare_members, is_complete
from thinking_seeds.experiments.recorded_defaults import RunRecords, with_recorded_defaults
from thinking_seeds.experiments.run_spec import RunSpec, spec_of
from thinking_seeds.experiments.sft_control import control_complete, control_config, control_run_id, recorded_controls
from thinking_seeds.experiments.spec import ComparisonSpec
from thinking_seeds.pipeline.checkpoint_eval import FINAL_TEST_STAGE

__all__ = ["archive_finished", "archiver", "restore_archived"]


_Planned = dict[str, tuple[RunConfig, Callable[[Path], bool], list[int]]]


def _planned(spec: ComparisonSpec, specs: Sequence[RunSpec], runs_dir: Path) -> _Planned:
    """Every run directory the comparison makes: run id -> (its config, "trained?" check on the runs
    folder, the policy steps its final test covers). θ_0's final test lives in the first run's.
    `specs` come from prepare (their recorded defaults kept); the controls' are looked up here."""
    out: _Planned = {}
    for s in specs:
        cfg = s.config()
        steps = [0, cfg.iterations] if s is specs[0] else [cfg.iterations]
        out[s.run_id] = (cfg, lambda d, s=s: is_complete(s, d), steps)
    if spec.control:
        seeds, preset, base = spec.control_seed_list(specs), specs[0].preset, specs[0].base_overrides
        kept = recorded_controls(spec.compare_id, preset, base, seeds, runs_dir, spec.report_dir)
        for seed in seeds:
            rid = control_run_id(spec.compare_id, seed)
            cfg = control_config(preset, base, seed, kept[seed])
            out[rid] = (cfg, lambda d, rid=rid: control_complete(d / rid), [cfg.iterations])
    return out


def restore_archived(spec: ComparisonSpec, specs: Sequence[RunSpec], runs_dir: Path) -> list[str]:
    """Restore into `runs_dir` every archived run of this comparison (and of its --reference) whose
    config hash is the planned one; returns the restored run ids (see archive.restore)."""
    expected = {rid: cfg.config_hash() for rid, (cfg, _, _) in _planned(spec, specs, runs_dir).items()}
    out = restore(spec.report_dir / "runs", runs_dir, expected, spec.final_test)
    if spec.reference:
        ref_dir = Path(spec.out_dir) / spec.reference  # the reference's report folder (its archive: runs/)
        ref_root, records = ref_dir / "runs", RunRecords(runs_dir, ref_dir)  # the reference's own records
        methods, seeds = {s.method for s in specs}, {s.seed for s in specs}
        ref = {
            m["run_id"]: with_recorded_defaults([spec_of(m)], runs_dir, ref_dir, records)[0].config().config_hash()
            for m in compare_members(spec.reference, ref_root)
            if m.get("method") in methods
            and m.get("seed") in seeds
            and not m.get("sweep")
            and archive_record(ref_root / m["run_id"]) is not None
        }  # what reference_members takes
        out += restore(ref_root, runs_dir, ref, final_test=False)
    return out


def archive_finished(
    spec: ComparisonSpec, specs: Sequence[RunSpec], runs_dir: Path, only: Sequence[str] | None = None
) -> list[str]:
    """Archive every finished run (trained, and final-tested when the comparison tests) that the
    archive does not hold as it is now; returns the ids written. Restored copies are skipped."""
    from thinking_seeds.store.run_dir import RunDir

    written = []
    for rid, (cfg, trained, steps) in _planned(spec, specs, Path(runs_dir)).items():
        run = RunDir.for_run(rid, Path(runs_dir))
        root = run.root
        if only is not None and rid not in only:
            continue
        if archive_record(root) is not None or not run.config_path.is_file():
            continue  # a restored copy (archived already), or a run not started
        tested = all(run.metrics(k, FINAL_TEST_STAGE).is_file() for k in steps)
        if (spec.final_test and not tested) or not trained(Path(runs_dir)):
            continue
        if archive_run(root, spec.report_dir / "runs", cfg.config_hash(), tested):
            written.append(rid)
    return written


def archiver(spec: ComparisonSpec, specs: Sequence[RunSpec], runs_dir: Path) -> Callable[[Job], None] | None:
    """run_jobs' on_done hook: archive a run as soon as its job ends (with spec.archive), so a
    session that ends half-way through the comparison keeps every run finished before."""
    if not spec.archive:
        return None
    return lambda job: archive_finished(spec, specs, runs_dir, only=[job.run_root.name]) if job.run_root else None
