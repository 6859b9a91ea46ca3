"""A vLLM worker killed -9 under tensor parallelism (rollout.tensor_parallel_size=2: vLLM's multiprocessing
executor, two worker processes, on the CPU here) ends the engine's call in one line that names it
(engine/vllm_died.py), not vLLM's "Executor failed." traceback; the run's rerun resumes as after any
death (tests/e2e/test_resume_kill.py). Only in the vLLM environment (make test-vllm)."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

from tests.helpers.vllm_runs import save_tiny  # noqa: E402
from thinking_seeds.config import load_config  # noqa: E402
from thinking_seeds.engine.rollout import SamplingParams  # noqa: E402
from thinking_seeds.engine.vllm_died import VLLMWorkerDied, worker_processes  # noqa: E402
from thinking_seeds.engine.vllm_engine import VLLMEngine  # noqa: E402
from thinking_seeds.flows.cli.errors import is_user_error, user_error_text  # noqa: E402


def test_a_tensor_parallel_worker_killed_while_sampling_is_one_line(tmp_path):
    cfg = load_config("tiny", ["rollout.engine=vllm", "rollout.tensor_parallel_size=2"])
    eng = VLLMEngine(save_tiny(tmp_path / "m", 0), cfg)
    try:
        procs = worker_processes(eng.llm)  # vLLM's objects are where vllm_died.py looks for them
        assert [p.name for p in procs] == ["VllmWorker-0", "VllmWorker-1"]
        params = SamplingParams(max_new_tokens=100, seed=0)
        assert len(eng.generate([[3, 4, 5]] * 4, params)) == 4  # both shards work
        victim = procs[1]
        threading.Timer(1.0, os.kill, (victim.pid, signal.SIGKILL)).start()
        start = time.monotonic()
        with pytest.raises(VLLMWorkerDied) as caught:
            for _ in range(50):  # killed in flight, or before one of the next calls
                eng.generate([[3, 4, 5]] * 64, params)
        assert time.monotonic() - start < 120
        line, _ = user_error_text(caught.value)
        assert is_user_error(caught.value) and "\n" not in line
        assert line.startswith(f"vLLM worker VllmWorker-1 (pid {victim.pid}) died while sampling: killed by SIGKILL")
        assert line.endswith("rerun the same command to resume the run from its last finished stage")
    finally:
        eng.close()
