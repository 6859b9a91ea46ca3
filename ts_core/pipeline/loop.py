"""A plain-Python training loop over the stages (no Prefect): the algorithm box, runnable anywhere.

    for k in 0 .. iterations-1:
        snapshot(k); seeds(k); continuation(k); verify(k); update(k); evaluate(k)

With pipeline.overlap, seeds(k+1) are sampled in a thread while update(k) runs (`update_outcome`);
the seeds stage k+1 then writes them in its turn (pipeline/seeds_ahead.py). With pipeline.max_staleness
= s the thread also samples continuation(k+1) with θ_{k+1-s} (pipeline/groups_ahead.py).

`stage_outcome` (`run_stage`: its manifest) is the one place that turns a stage function's Manifest
into files (metrics Parquet, manifest JSON) and skips a stage whose outputs are already complete;
the Prefect tasks call it too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from thinking_seeds.config import RunConfig
from thinking_seeds.pipeline.ctrl_c import raise_if_interrupted
from thinking_seeds.pipeline.graph import STAGES, upstream_of
from thinking_seeds.pipeline.policy_chain import update_output_ok
from thinking_seeds.pipeline.progress_lines import summary
from thinking_seeds.pipeline.run_lifecycle import run_opened, sampled_ahead
from thinking_seeds.pipeline.session import Session
from thinking_seeds.pipeline.stage_prepare import prepare
from thinking_seeds.pipeline.stages import STAGE_FUNCS
from thinking_seeds.pipeline.trainer_client import prelaunch_trainer
from thinking_seeds.store.compaction import compact_behind
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.run_dir import RunDir


class Outcome(NamedTuple):
    """A stage's manifest, and whether it was skipped: the manifest on disk vouched for its outputs."""

    manifest: Manifest
    skipped: bool


def prepare_outcome(run: RunDir, cfg: RunConfig) -> Outcome:
    """Prepare the run directory unless that is already done (the manifest is then left untouched)."""
    done = run.completed(0, "prepare", cfg.config_hash(), upstream={})
    if done is not None:
        return Outcome(done, skipped=True)
    m = prepare(run, cfg)
    run.write_manifest(m)
    return Outcome(m, skipped=False)


def stage_outcome(s: Session, stage: str, k: int) -> Outcome:
    """Run one stage unless its completed outputs are already there (then return their manifest).

    "Completed" means: manifest present, same config hash, output files hashing as recorded, and
    computed from the current manifests of its upstream stages (`upstream_of`). The manifests are
    the only record of what is done: the Prefect tasks ask this function too.
    """
    if stage == STAGES[0]:  # iteration k starts: compact the block it finishes, in the background (ts sql)
        compact_behind(s.run.root, k)
    upstream = s.run.upstream_digests(upstream_of(stage, k))
    done = s.run.completed(k, stage, s.cfg.config_hash(), upstream)
    if done is not None and (stage != "update" or update_output_ok(s.run, done, k)):
        return Outcome(done, skipped=True)
    m = STAGE_FUNCS[stage](s, k)
    m.upstream = upstream
    metrics = dict(m.metrics)
    metrics.update({f"time/{stage}/{part}": sec for part, sec in m.seconds.items()})
    if metrics and stage != "evaluate":  # evaluate writes its own file, labelled by policy step
        m.record(s.run, "metrics", s.run.write_metrics(k, stage, metrics))
    s.run.write_manifest(m)
    if s.tracker is not None:  # copies for the user's trackers; the Parquet metrics stay the record
        s.tracker.log(metrics, step=k + 1 if stage == "evaluate" else k)
    raise_if_interrupted()  # a Ctrl-C that something swallowed stops the run here, its stage done (ctrl_c.py)
    return Outcome(m, skipped=False)


def update_outcome(s: Session, k: int) -> Outcome:
    """The update stage k, with the work ahead of iteration k+1 (run_lifecycle.sampled_ahead: seeds with
    pipeline.overlap, groups too with pipeline.max_staleness) sampled meanwhile in another thread."""
    with sampled_ahead(s, k):
        return stage_outcome(s, "update", k)


def run_prepare(run: RunDir, cfg: RunConfig) -> Manifest:
    return prepare_outcome(run, cfg).manifest


def run_stage(s: Session, stage: str, k: int) -> Manifest:
    return stage_outcome(s, stage, k).manifest


def train(
    run: RunDir,
    cfg: RunConfig,
    on_stage: Callable[[int, str, Manifest], None] | None = None,
    on_prepared: Callable[[Manifest], None] | None = None,
    then: Callable[[RunConfig], None] | None = None,
) -> RunDir:
    """Run (or resume) all iterations of `cfg` in `run`, in this process. `on_stage(k, stage, manifest)`
    after every stage from θ_0's evaluation (k = -1) on; `on_prepared(manifest)` after the prepare stage;
    `then(cfg)` after the last iteration, while the run is still open (its lock held, its engine loaded)."""
    with run_opened(run, cfg) as cfg:  # pipeline/run_lifecycle.py: what opens and closes a run
        prepared = run_prepare(run, cfg)
        if on_prepared:
            on_prepared(prepared)
        prelaunch_trainer(run, cfg)  # update.launcher=accelerate: it starts beside θ_0's evaluation
        s = Session(run, cfg)
        try:
            m = run_stage(s, "evaluate", -1)  # θ_0, the curves' starting point
            if on_stage:
                on_stage(-1, "evaluate", m)
            for k in range(cfg.iterations):
                for stage in STAGES:
                    m = update_outcome(s, k).manifest if stage == "update" else run_stage(s, stage, k)
                    if on_stage:
                        on_stage(k, stage, m)
        finally:
            s.close()
        if then:
            then(cfg)
    return run


def main(argv: list[str] | None = None) -> None:
    """One run, no Prefect.

        python -m thinking_seeds.pipeline.loop --preset tiny --run-id X [--runs-dir D] [--set k=v ...]

    The entry point `thinking_seeds.experiments.compare.run_all` starts once per run of a comparison; it prints one
    line per stage (flushed), which is what lands in `runs/<id>/train.log`.
    """
    import argparse
    import time
    from pathlib import Path

    from thinking_seeds.config import load_config

    ap = argparse.ArgumentParser(description="Train (or resume) one run with the plain loop (no Prefect).")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--run-id", required=True)
    ap.add_argument(
        "--runs-dir", type=Path, default=None, help="folder of run directories (default: $TS_RUNS_DIR or ./runs)"
    )
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--final-test",
        action="store_true",
        help="after training, evaluate the final policy on the whole test split (eval.test_samples "
        "samples per prompt; the comparison's final-test stage), unless that is done",
    )
    ap.add_argument("--final-test-base", action="store_true", help="with --final-test: θ_0 as well")
    ap.add_argument(
        "--equal-iterations",
        type=int,
        default=None,
        metavar="STEP",
        help="with --final-test: θ_STEP as well, under the final-test-equal-iterations stage (a run given more "
        "iterations to match compute, tested at the iteration count of the methods it is compared with)",
    )
    a = ap.parse_args(argv)
    cfg = load_config(a.preset, a.overrides)
    run = RunDir.for_run(a.run_id, a.runs_dir.resolve() if a.runs_dir else None)
    t0 = time.perf_counter()
    print(
        f"run {run.run_id}: {cfg.algorithm}, seed {cfg.seed}, {cfg.iterations} iterations, config {cfg.config_hash()}",
        flush=True,
    )

    def on_stage(k: int, stage: str, m: Manifest) -> None:
        shown = summary(m.metrics)
        secs = sum(m.seconds.values())
        print(f"iteration {k}/{cfg.iterations - 1} {stage} {secs:.2f}s" + (f" | {shown}" if shown else ""), flush=True)

    def finish(cfg: RunConfig) -> None:  # in the run's life: the final tests sample with the run's engine
        print(f"done {run.root} in {time.perf_counter() - t0:.1f}s", flush=True)
        if a.final_test:
            final_tests(run, cfg, base=a.final_test_base, equal_iterations=a.equal_iterations)

    train(run, cfg, on_stage=on_stage, then=finish)


def final_tests(run: RunDir, cfg: RunConfig, base: bool = False, equal_iterations: int | None = None) -> None:
    """The comparison's final test of this run's last policy (and θ_0; and θ_`equal_iterations` under
    its own stage), right after its training, so a comparison stopped half-way still has test numbers
    for every run that finished, and none of them needs the run's checkpoints later."""
    import time

    from thinking_seeds.pipeline.checkpoint_eval import EQUAL_ITERATIONS_STAGE, FINAL_TEST_STAGE, evaluate_checkpoint
    from thinking_seeds.store.checkpoint_format import list_checkpoints

    tests = [(0, FINAL_TEST_STAGE)] if base else []
    tests.append((cfg.iterations, FINAL_TEST_STAGE))
    if equal_iterations is not None:
        tests.append((equal_iterations, EQUAL_ITERATIONS_STAGE))
    for step, stage in tests:
        if run.metrics(step, stage).exists():
            continue
        if stage == EQUAL_ITERATIONS_STAGE and step not in {c.step for c in list_checkpoints(run.policy_root)}:
            print(f"{stage} θ_{step} skipped: the run kept no checkpoint of step {step}", flush=True)
            continue
        t = time.perf_counter()
        name = "final test" if stage == FINAL_TEST_STAGE else stage
        out = evaluate_checkpoint(
            run.root,
            step,
            "test",
            seeded=False,
            all_prompts=True,
            stage=stage,
            samples=cfg.eval.test_samples,
        )
        print(
            f"{name} θ_{step}: accuracy {out['metrics']['eval/accuracy']:.4f} in {time.perf_counter() - t:.1f}s",
            flush=True,
        )


if __name__ == "__main__":  # pragma: no cover - exercised through compare.run_all's subprocesses
    main()
