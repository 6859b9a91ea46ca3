"""A run's life in this process, written once for the plain loop (pipeline/loop.py) and the Prefect flow
(flows/train.py): open it, decide what is sampled ahead beside each update, and close it.

    with run_opened(run, cfg) as cfg:      # inputs checked, the lock, the run's own config (resume)
        prepare; prelaunch_trainer; evaluate θ_0
        for k: ...; with sampled_ahead(s, k): update k; ...
    # closed, whatever happened: the run's RunResources (work held ahead, in-memory policies, the shared
    # session, trackers, and its processes: trainer (at once on Ctrl-C), engine, Ray and verifier pools), the lock

The two callers differ only in how they run a stage (a function call, or a Prefect task); what is opened,
sampled ahead (in a thread of this process, `sampled_ahead`) and closed is decided here.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from thinking_seeds.config import RunConfig
from thinking_seeds.pipeline.groups_ahead import staleness_due
from thinking_seeds.pipeline.policy_chain import flush_checkpoints
from thinking_seeds.pipeline.resume import continued_config, record_extension, resume_line
from thinking_seeds.pipeline.run_resources import close_resources, resources_for
from thinking_seeds.pipeline.seeds_ahead import overlap_due
from thinking_seeds.pipeline.session import Session
from thinking_seeds.pipeline.stage_continuation import prepare_ahead, sample_ahead
from thinking_seeds.pipeline.stage_prepare import check_inputs
from thinking_seeds.pipeline.stage_seeds import draft_ahead
from thinking_seeds.store.run_dir import RunDir

# what is sampled beside update k: its name (the thread's) and its body
WorkAhead = tuple[str, Callable[[Session, int], bool]]


@contextmanager
def run_opened(run: RunDir, cfg: RunConfig, on_resume: Callable[[str], None] | None = None) -> Iterator[RunConfig]:
    """Open `run` for training with `cfg` and yield the config it continues with (an existing run: the same
    config, or more iterations; pipeline/resume.py). `on_resume` gets the resume line of a run with finished
    stages (`resume_line`, said before an extension is recorded). On a normal end θ_T's background
    checkpoint is flushed to disk; on any end everything the run holds in this process is released."""
    check_inputs(run, cfg)  # the data files and the model directory, before the lock makes the run directory
    run.acquire_lock()
    try:
        resources_for(run)  # what the run holds in this process, from here to its close
        cfg = continued_config(run, cfg)
        if on_resume is not None and (line := resume_line(run, cfg)):
            on_resume(line)
        record_extension(run, cfg)
        yield cfg
        flush_checkpoints(run, cfg)  # θ_T's checkpoint, written in the background, is on disk
    finally:
        interrupted = sys.exc_info()[0] is KeyboardInterrupt
        try:
            # work held ahead, the in-process trainer and the run's policies in memory, the flow's shared
            # Session (the loop closes its own), the run's trackers, then its processes: the persistent
            # trainer (Ctrl-C: terminated now), the engine, the Ray and verifier pools (pipeline/run_resources.py)
            close_resources(run, at_once=interrupted)
        finally:
            run.release_lock()


def work_ahead(s: Session, k: int) -> WorkAhead | None:
    """What to sample for iteration k+1 while update k runs: its groups (pipeline.max_staleness: seeds and
    groups by θ_{k+1-s}, if that policy is at hand), its seeds (pipeline.overlap, unless written already),
    or nothing."""
    cfg = s.cfg
    if staleness_due(cfg, k):
        return ("groups-ahead", sample_ahead) if prepare_ahead(s, k + 1) else None
    if overlap_due(cfg, k) and not s.run.manifest_path(k + 1, "seeds").exists():
        return "seeds-ahead", draft_ahead
    return None


@contextmanager
def sampled_ahead(s: Session, k: int) -> Iterator[str | None]:
    """Run update k inside this: the work ahead of iteration k+1 (`work_ahead`) is sampled meanwhile in a
    thread, joined before the next stage, which needs the engine it samples on. Yields the thread's name
    (None: nothing to sample).

    A plain thread in the flow too, not a Prefect task: a task run costs ~36 ms of CPU (the flow's and
    its server's: bench/prefect_task_cost.py), spent on the cores the update and the drafts share, and
    the work is no stage (no manifest): its seconds are the seeds stage's `time/seeds/*`. Its failures
    are its own: the stage k+1 then samples the work itself. The update stays in the caller's thread:
    the persistent trainer it may launch dies with the thread that started it (PR_SET_PDEATHSIG)."""
    work = work_ahead(s, k)
    if work is None:
        yield None
        return
    name, body = work
    ahead = threading.Thread(target=body, args=(s, k + 1), name=f"{name}-{k + 1}", daemon=True)
    ahead.start()
    try:
        yield ahead.name
    finally:
        ahead.join()
