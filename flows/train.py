"""The training flow: Thinking Seeds (docs/algorithm.md §2) as Prefect tasks, one per stage.

    prepare: config, data, θ_0;  evaluate θ_0
    for k = 0 .. K-1:
        snapshot      θ_k joins the historical pool H        (every pool.snapshot_every)
        seeds         h ~ H writes drafts z; cut at λ·|z|     -> prefix corpus
        continuation  θ_k continues every seed; on-policy samples (θ_{k-s}: pipeline.max_staleness)
        verify        rewards, statuses, group advantages     -> rollouts
        update        loss of docs/algorithm.md §3                         -> θ_{k+1}
                      (pipeline.overlap: seeds k+1 sampled meanwhile in a thread;
                       pipeline.max_staleness: groups k+1 too; pipeline/run_lifecycle.sampled_ahead)
        evaluate      held-out accuracy, pass@k of θ_{k+1}    (every eval.every)

Re-running with the same run id resumes: a stage whose manifest is on disk, with the same config,
intact outputs and the same upstream digests, is skipped (its task run ends in state "Skipped");
the run directory's manifests are the only record of what is done (see `tasks/stage_task.py`).
A Prefect server that goes away under the flow stops it at the end of the stage (flows/api_watch.py).

    ts train --preset tiny --run-id demo --set iterations=2
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from prefect import flow, get_run_logger
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from thinking_seeds.config import RunConfig, load_config
from thinking_seeds.flows.api_watch import stop_if_api_lost, stops_when_api_lost, while_api_answers
from thinking_seeds.flows.prefect_logs import prefect_console
from thinking_seeds.flows.run_errors import user_errors_in_one_line
from thinking_seeds.pipeline.graph import STAGES
from thinking_seeds.pipeline.progress_lines import evaluation_line, prepare_done_line, prepare_start_line, summary
from thinking_seeds.pipeline.run_lifecycle import run_opened, sampled_ahead
from thinking_seeds.pipeline.session import session_for
from thinking_seeds.pipeline.trainer_client import prelaunch_trainer
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.tasks import (
    continuation_task,
    evaluate_task,
    prepare_task,
    seeds_task,
    snapshot_task,
    update_task,
    verify_task,
)
from thinking_seeds.tasks.artifacts import artifact_key
from thinking_seeds.tasks.stage_task import call_stage


class TrainProgress(AbstractContextManager):
    """A rich progress bar on stderr over prepare, the θ_0 evaluation and iterations x stages, plus a
    Prefect progress artifact updated after every iteration."""

    def __init__(self, cfg: RunConfig, run: RunDir):
        self.total = 2 + cfg.iterations * len(STAGES)  # prepare + evaluate θ_0 + the iterations
        self.done = 0
        self.run = run
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            # markup off: Prefect's log lines print through this console while the bar is live
            console=Console(stderr=True, markup=False, highlight=False),
            transient=False,
        )
        self.task_id = None
        self.artifact_id = None
        self._logs = prefect_console(self.bar.console)

    def __enter__(self) -> TrainProgress:
        self._logs.__enter__()  # Prefect's log lines go above the bar, never onto its line
        self.bar.start()
        self.task_id = self.bar.add_task(f"{self.run.run_id}: prepare", total=self.total)
        self.artifact_id = create_progress_artifact(
            progress=0.0,
            key=artifact_key(self.run.run_id, "progress"),
            description=f"Training progress of run {self.run.run_id} (stages done / all stages)",
        )
        return self

    def step(self, k: int, stage: str, m: dict) -> None:
        self.done += 1
        what = {"prepare": "prepare"}.get(stage, f"iteration {k} {stage}" if k >= 0 else "evaluate θ_0")
        self.bar.update(self.task_id, advance=1, description=f"{self.run.run_id}: {what}")

    def iteration_done(self, k: int) -> None:
        while_api_answers(  # a dead server: the run stops here (flows/api_watch.py)
            update_progress_artifact,
            self.artifact_id,
            progress=100.0 * self.done / self.total,
            description=f"run {self.run.run_id}: iteration {k} done",
        )

    def __exit__(self, kind, *exc) -> None:
        if kind is KeyboardInterrupt:
            self.bar.live.transient = True  # a Ctrl-C ends in one line: the bar goes
        self.bar.stop()
        self._logs.__exit__(kind, *exc)


def iteration_table(k: int, manifests: list[dict]) -> list[dict]:
    """One row per metric of iteration k (stage, name, value), plus each stage's total seconds."""
    rows = []
    for m in manifests:
        named = [(n, round(float(v), 6)) for n, v in sorted(m.get("metrics", {}).items())]
        named.append(("seconds", round(sum(m.get("seconds", {}).values()), 3)))
        rows += [{"iteration": k, "stage": m["stage"], "name": n, "value": v} for n, v in named]
    return rows


@flow(name="train", flow_run_name="train-{run_id}", log_prints=True)
@user_errors_in_one_line
@stops_when_api_lost  # inside: its exit on a lost server is not a user error
def train_flow(preset: str = "tiny", run_id: str = "demo", overrides: list[str] | None = None) -> str:
    """Train (or resume) run `run_id` with `preset` and dotted `overrides`; returns the run directory."""
    log = get_run_logger()
    cfg = load_config(preset, overrides or [])
    run = RunDir.for_run(run_id)

    def resuming(line: str) -> None:  # the resume line in the UI's log; `ts train` printed it already (ts_printed)
        log.info("%s", line, extra={"ts_printed": True})

    with run_opened(run, cfg, on_resume=resuming) as cfg:  # pipeline/run_lifecycle.py: what opens and closes a run
        h = cfg.config_hash()
        log.info("run %s (%s, config %s): %d iterations", run.root, cfg.algorithm, h, cfg.iterations)
        with TrainProgress(cfg, run) as bar:
            ran: set[int] = set()  # iterations with a stage that ran (k = -1: θ_0's evaluation): they publish

            def stage(task, k: int, *inputs: dict, **extra) -> dict:
                m, skipped = call_stage(task, run, k, h, *inputs, **extra)
                if not skipped:
                    ran.add(k)
                bar.step(k, task.name, m)
                stop_if_api_lost(task.name, k)  # the server is gone: stop here, the stage is done
                return m

            fresh = not run.manifest_path(0, "prepare").exists()
            if fresh:
                log.info("%s", prepare_start_line(cfg))
            theta = stage(prepare_task, 0, config=cfg.model_dump(mode="json"))  # θ_0
            if fresh:
                log.info("%s", prepare_done_line(theta.get("seconds") or {}, cfg))
            prelaunch_trainer(run, cfg)  # update.launcher=accelerate: it starts beside θ_0's evaluation
            ev = stage(evaluate_task, -1, theta)  # the curves' starting point
            report_iteration(run, -1, [ev], publish=-1 in ran)
            for k in range(cfg.iterations):
                snap = stage(snapshot_task, k, theta)  # θ_k joins the historical pool H
                seeds = stage(seeds_task, k, theta, snap)  # h ~ H writes drafts z; cut at λ·|z|
                gen = stage(continuation_task, k, theta, seeds)  # θ_k continues every seed
                rollouts = stage(verify_task, k, gen)  # rewards, group advantages
                # seeds k+1 (pipeline.overlap), and groups k+1 by θ_{k+1-s} (pipeline.max_staleness), sampled in
                # a thread of this process while θ_{k+1} trains (no task run: run_lifecycle.sampled_ahead)
                with sampled_ahead(session_for(run), k):
                    theta = stage(update_task, k, theta, rollouts)  # θ_{k+1}
                ev = stage(evaluate_task, k, theta)  # held-out accuracy of θ_{k+1}
                report_iteration(run, k, [snap, seeds, gen, rollouts, theta, ev], publish=k in ran)
                bar.iteration_done(k)
    log.info("run %s done: %s", run.run_id, run.root)
    return str(run.root)


def report_iteration(run: RunDir, k: int, manifests: list[dict], publish: bool = True) -> None:
    """Iteration k's lines in the log (k = -1: the evaluation of θ_0), as `ts train --no-prefect` prints
    them, and (`publish`: a stage of it ran in this flow run) a table artifact with its metrics: a resumed
    run's skipped iterations published theirs when they ran."""
    merged = {n: v for m in manifests for n, v in m.get("metrics", {}).items()}
    trained = {n: v for n, v in merged.items() if n != "eval/accuracy"}
    if k >= 0:  # the iteration first, then the evaluation of the policy it trained (as ts train --no-prefect)
        get_run_logger().info("iteration %d: %s", k, summary(trained) or "done")
    if "eval/accuracy" in merged:
        get_run_logger().info("%s", evaluation_line(k + 1, merged))
    rows = iteration_table(k, manifests) if publish else []
    if rows:
        label = "θ_0 evaluation" if k < 0 else f"iteration {k}"
        while_api_answers(  # a dead server: the run stops here (flows/api_watch.py)
            create_table_artifact,
            rows,
            key=artifact_key(run.run_id, "metrics"),
            description=f"run {run.run_id}: metrics of {label}",
        )
