"""A vLLM executor worker that died, in one line (engine/vllm_died.py): real worker processes killed
-9 and stopped by SIGTERM, behind the objects vLLM's in-process engine holds them in (LLM -> LLMEngine
-> engine core client -> engine core -> executor). That vLLM lays them out so: test_vllm_engine.py's
tensor-parallel test (make test-vllm)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from types import SimpleNamespace

import pytest

from thinking_seeds.engine.vllm_died import VLLMWorkerDied, dead_worker, worker_deaths_in_one_line
from thinking_seeds.flows.cli.errors import is_user_error, user_error_text


def _llm(procs):
    executor = SimpleNamespace(workers=[SimpleNamespace(proc=p) for p in procs])
    core = SimpleNamespace(engine_core=SimpleNamespace(model_executor=executor))
    return SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core))


@pytest.fixture
def workers():
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=time.sleep, args=(60,), name=f"VllmWorker-{i}") for i in range(2)]
    for p in procs:
        p.start()
    yield procs
    for p in procs:
        p.kill()
        p.join()


def test_the_worker_killed_first_is_named_not_the_one_shutdown_stopped(workers):
    os.kill(workers[1].pid, signal.SIGKILL)
    workers[1].join()
    workers[0].terminate()  # what vLLM's executor shutdown does to the others
    workers[0].join()
    assert dead_worker(_llm(workers)) is workers[1]
    with pytest.raises(VLLMWorkerDied) as caught, worker_deaths_in_one_line(_llm(workers), "sampling"):
        raise RuntimeError("Executor failed.")
    line, _ = user_error_text(caught.value)
    assert is_user_error(caught.value)
    assert line.startswith(f"vLLM worker VllmWorker-1 (pid {workers[1].pid}) died while sampling: killed by SIGKILL")
    assert "`ts plan`" in line and line.endswith("resume the run from its last finished stage")


def test_an_error_with_every_worker_alive_is_left_alone(workers):
    with pytest.raises(RuntimeError, match="Executor failed"), worker_deaths_in_one_line(_llm(workers), "sampling"):
        raise RuntimeError("Executor failed.")
    with pytest.raises(ValueError, match="bad"), worker_deaths_in_one_line(SimpleNamespace(), "sampling"):
        raise ValueError("bad")  # one process (no executor workers): vLLM's own error
