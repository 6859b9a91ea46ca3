"""A vLLM worker process that died, in one line (transports/process_died.py's form).

With rollout.tensor_parallel_size > 1 the in-process vLLM engine (vllm_engine.py) runs its shards in
worker processes of vLLM's multiprocessing executor. When one dies (the OOM killer, a CUDA fault), vLLM
logs "Worker proc ... died unexpectedly" from a monitor thread, shuts the executor down, and the call
in flight -- or the next one -- fails with "Executor failed." or an error of its message queues: a
traceback that names neither the worker nor what to do. `worker_deaths_in_one_line` turns a failure
of a vLLM call into the one line when one of the executor's workers has exited:

    error: vLLM worker VllmWorker-1 (pid 4242) died while sampling: killed by SIGKILL (out of host or GPU
    memory? ...); full log: this process's output above (vLLM's workers write to it); rerun the same
    command to resume the run from its last finished stage

The executor is found by walking vLLM's objects (LLM -> LLMEngine -> in-process engine core -> its
model executor -> workers); a vLLM whose objects are laid out otherwise keeps its own error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from thinking_seeds.transports.process_died import RESUME, ProcessDied, died, how_it_ended

LOG = "this process's output above (vLLM's workers write to it)"
# LLM.llm_engine (v1 LLMEngine) .engine_core (InprocClient) .engine_core (EngineCore) .model_executor
_EXECUTOR_PATH = ("llm_engine", "engine_core", "engine_core", "model_executor")


class VLLMWorkerDied(ProcessDied):
    """A worker process of vLLM's executor exited (one line)."""


def worker_processes(llm: Any) -> list[Any]:
    """The multiprocessing.Process of each of the executor's workers (none: one process, or unknown)."""
    obj = llm
    for name in _EXECUTOR_PATH:
        obj = getattr(obj, name, None)
        if obj is None:
            return []
    return [h.proc for h in getattr(obj, "workers", None) or () if getattr(h, "proc", None) is not None]


def dead_worker(llm: Any) -> Any | None:
    """A worker process that has exited, or None: one that died of its own before those vLLM's shutdown
    then stopped (SIGTERM, -15)."""
    gone = [p for p in worker_processes(llm) if p.exitcode is not None]
    return min(gone, key=lambda p: p.exitcode == -15, default=None)


@contextmanager
def worker_deaths_in_one_line(llm: Any, doing: str) -> Iterator[None]:
    """Run a vLLM call; if it fails and a worker has exited, raise VLLMWorkerDied instead (`doing`:
    what the engine was doing, e.g. 'sampling', 'loading θ_3')."""
    try:
        yield
    except Exception:
        proc = dead_worker(llm)
        if proc is None:
            raise
        what = f"vLLM worker {proc.name} (pid {proc.pid}) died while {doing}"
        raise died(what, how_it_ended(proc.exitcode), LOG, "", RESUME, VLLMWorkerDied) from None
