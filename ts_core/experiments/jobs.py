"""Subprocesses of a comparison: each run, SFT control and final test is one `python -m ...` job.

    results = run_jobs([Job("cmp-grpo-s0", cmd, log_path)], runs_dir, parallel=2)
    raise_on_failures(results)      # CompareError naming every failed job, its log and the log's tail

At most `parallel` jobs run at once, each in its own process group with one torch thread, output
appended to its log, a rich progress display on stderr. On a machine with GPUs each running job sees
GPUs of its own (CUDA_VISIBLE_DEVICES: the visible GPUs split in `parallel` equal groups,
config/placement.job_gpu_slots), so two runs and their trainers never share a GPU by accident; fewer GPUs
than concurrent jobs is refused in one line. A failed job does not stop the others (a
comparison of many hours should not lose the runs that work to one that does not); rerunning the
same command resumes the failed ones. Never imports prefect.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError
from thinking_seeds.config.placement import job_gpu_slots, visible_gpu_ids
from thinking_seeds.store.child_guard import guard_children

__all__ = [
    "CompareError",
    "Job",
    "JobResult",
    "checkpoint_eval_cmd",
    "child_env",
    "raise_on_failures",
    "run_jobs",
    "visible_gpus",
]


class CompareError(RuntimeError):
    """Runs of a comparison failed; the message names them and their logs."""


@dataclass
class Job:
    """One subprocess of a comparison: a run, an SFT control or a final test."""

    run_id: str
    cmd: list[str]
    log: Path
    done: bool = False  # already complete: not started
    run_root: Path | None = None  # the run directory it writes (an on_done hook looks there)


def checkpoint_eval_cmd(run_root: Path, step: int, split: str, stage: str, samples: int) -> list[str]:
    """`python -m thinking_seeds.pipeline.checkpoint_eval`: θ_step of the run on every prompt of `split`
    (plain sampling, `samples` per prompt), its metrics filed under `stage`."""
    cmd = [sys.executable, "-m", "thinking_seeds.pipeline.checkpoint_eval", str(run_root), "--step", str(step)]
    return cmd + ["--split", split, "--all-prompts", "--no-seeded", "--stage", stage, "--samples", str(samples)]


@dataclass
class JobResult:
    run_id: str
    status: str  # done | skipped | failed
    returncode: int | None
    seconds: float
    log: str
    tail: str = field(default="", repr=False)


def child_env(runs_dir: Path) -> dict[str, str]:
    """The environment of a run's process: one torch thread, the runs folder (the package is installed)."""
    env = dict(os.environ)
    env.update(
        {
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "TS_RUNS_DIR": str(Path(runs_dir).resolve()),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def visible_gpus() -> list[str]:
    """The GPUs this process sees, as CUDA_VISIBLE_DEVICES names them ([] without a GPU)."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return visible_gpu_ids(os.environ.get("CUDA_VISIBLE_DEVICES"), count)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the process group this module started for `proc` (its leader is proc itself)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_jobs(
    jobs: Sequence[Job],
    runs_dir: Path,
    parallel: int = 2,
    title: str = "runs",
    console: Any = None,
    env: dict[str, str] | None = None,
    poll: float = 0.5,
    on_done: Callable[[Job], None] | None = None,
    gpus: list[str] | None = None,
) -> list[JobResult]:
    """Run `jobs` as subprocesses, at most `parallel` at once, with a rich progress display.

    Output goes to each job's log (appended). A failed job does not stop the others. `on_done(job)`
    runs in this process right after a job exits successfully (the comparison archives the run
    there, so a session that ends half-way keeps every run finished before). Interrupting (Ctrl-C)
    terminates the processes started here, then re-raises. `gpus` (default: the visible ones) are
    split between the jobs running at once, each job's CUDA_VISIBLE_DEVICES its own share.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if parallel < 1:
        raise ConfigError(f"parallel must be >= 1, got {parallel}")
    console = console or Console(stderr=True)
    env = env or child_env(runs_dir)
    # The jobs run in their own sessions (below): nothing else stops them if this supervisor is killed
    # (kill -9, a closed terminal), and a job trained on holding its run's lock and its GPU.
    guard_children()
    results: dict[str, JobResult] = {}
    pending = [j for j in jobs if not j.done]
    for j in jobs:
        if j.done:
            results[j.run_id] = JobResult(j.run_id, "skipped", 0, 0.0, str(j.log))
    running: dict[str, tuple[Job, subprocess.Popen, float, Any, Any]] = {}
    # GPU shares for the jobs running at once; a job takes a free one when it starts and returns it at its end.
    slots = job_gpu_slots(visible_gpus() if gpus is None else gpus, min(parallel, max(1, len(pending))))
    free_slots = list(slots or [])
    slot_of: dict[str, str] = {}
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        overall = progress.add_task(f"{title} done", total=len(jobs), completed=len(jobs) - len(pending))
        for r in results.values():
            progress.console.print(f"[dim]skip {r.run_id}: already complete[/]")
        try:
            while pending or running:
                while pending and len(running) < parallel:
                    job = pending.pop(0)
                    job.log.parent.mkdir(parents=True, exist_ok=True)
                    fh = open(job.log, "a", buffering=1)
                    fh.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(job.cmd)}\n")
                    # Own session: an interrupt here ends the run's whole process group (its verifier
                    # workers too), and a terminal's Ctrl-C reaches only this supervisor.
                    job_env = env
                    if free_slots:
                        slot_of[job.run_id] = free_slots.pop(0)
                        job_env = {**env, "CUDA_VISIBLE_DEVICES": slot_of[job.run_id]}
                        fh.write(f"CUDA_VISIBLE_DEVICES={slot_of[job.run_id]}\n")
                    proc = subprocess.Popen(
                        job.cmd,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        env=job_env,
                        cwd=os.getcwd(),
                        start_new_session=True,
                    )
                    tid = progress.add_task(f"  {job.run_id}", total=None)
                    running[job.run_id] = (job, proc, time.perf_counter(), fh, tid)
                time.sleep(poll)
                for run_id, (job, proc, t0, fh, tid) in list(running.items()):
                    rc = proc.poll()
                    if rc is None:
                        progress.update(tid, description=f"  {run_id}: {_tail(job.log, 1).strip()[-90:]}")
                        continue
                    fh.close()
                    progress.remove_task(tid)
                    del running[run_id]
                    if run_id in slot_of:
                        free_slots.append(slot_of.pop(run_id))
                    secs = time.perf_counter() - t0
                    ok = rc == 0
                    results[run_id] = JobResult(
                        run_id, "done" if ok else "failed", rc, secs, str(job.log), "" if ok else _tail(job.log)
                    )
                    progress.advance(overall)
                    progress.console.print(
                        f"[green]done[/] {run_id} ({secs:.0f}s)"
                        if ok
                        else f"[red]failed[/] {run_id} (exit {rc}), log: {job.log}"
                    )
                    if ok and on_done is not None:
                        try:
                            on_done(job)
                        except Exception as e:  # a hook must not end the jobs still running; callers check again
                            progress.console.print(f"[yellow]after {run_id}: {type(e).__name__}: {e}[/]")
        except BaseException:
            for _job, proc, _, _fh, _ in running.values():
                _signal_group(proc, signal.SIGTERM)
            for _job, proc, _, fh, _ in running.values():
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
                fh.close()
            raise
    return [results[j.run_id] for j in jobs]


def raise_on_failures(results: Sequence[JobResult]) -> None:
    failed = [r for r in results if r.status == "failed"]
    if failed:
        parts = [f"{r.run_id} (exit {r.returncode}), log {r.log}:\n{r.tail}" for r in failed]
        raise CompareError(
            f"{len(failed)} of {len(results)} runs failed; rerun the same command to resume them.\n\n"
            + "\n\n".join(parts)
        )
