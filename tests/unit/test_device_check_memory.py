"""The device check's per-process GPU memory (scripts/device_check.py GpuSampler), with a stand-in
nvidia-smi on PATH: the most each pid held, this process named the pipeline and its children the trainer;
and the real-vocabulary model it builds has Qwen2.5's vocabulary."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO


@pytest.fixture(scope="module")
def device_check():
    spec = importlib.util.spec_from_file_location("device_check", REPO / "scripts" / "device_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_sampler_keeps_each_process_peak_and_its_role(tmp_path, monkeypatch, device_check):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        counter = tmp_path / "calls"
        fake = tmp_path / "nvidia-smi"
        # the pipeline's memory rises then falls; the child (a trainer) holds 3 GiB; pid 1 is someone else's
        fake.write_text(
            "#!/bin/sh\n"
            f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}\n"
            f'if [ "$n" = 1 ]; then m=2048; else m=512; fi\n'
            f'echo "{os.getpid()}, $m"\necho "{child.pid}, 3072"\necho "1, 100"\n'
        )
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
        sampler = device_check.GpuSampler(interval=0.05)
        deadline = time.monotonic() + 20
        while (not counter.exists() or int(counter.read_text() or 0) < 4) and time.monotonic() < deadline:
            time.sleep(0.05)
        procs = {p["pid"]: p for p in sampler.close()}
    finally:
        child.kill()
        child.wait()
    assert procs[os.getpid()] == {"pid": os.getpid(), "role": "pipeline", "max_used_gib": 2.0}
    assert procs[child.pid] == {"pid": child.pid, "role": "trainer", "max_used_gib": 3.0}
    assert procs[1]["role"] == "other"


def test_gpu_sampler_without_nvidia_smi_reports_nothing(tmp_path, monkeypatch, device_check):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert device_check.GpuSampler(interval=0.05).close() == []


def test_the_real_vocabulary_case_is_qwen_sized(device_check):
    c = device_check.QWEN2_REAL_VOCAB
    assert c["vocab_size"] == device_check.QWEN_VOCAB == 151_936
    emb = c["vocab_size"] * c["hidden_size"]  # tied: one matrix
    assert emb > 0.5 * (emb + c["num_hidden_layers"] * 15e6)  # the vocabulary dominates, as in Qwen2.5-0.5B
