"""Issue #16's device check, its CPU half (`scripts/device_check.sh --cpu-only`, slow: CI's second
step): both algorithms generate and update on the CPU, and the GPU half says it was skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

# --- the device check's CPU half ----------------------------------------------------------------


@pytest.mark.slow
def test_device_check_cpu_only(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), PYTHON=sys.executable)
    r = subprocess.run(
        ["bash", "scripts/device_check.sh", "--cpu-only"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = json.loads((tmp_path / "out" / "device_check.json").read_text())
    cpu = [c for c in res["cases"] if c["device"] == "cpu"]
    assert {c["algorithm"] for c in cpu} == {"grpo", "thinking_seeds"}
    for c in cpu:
        assert c["status"] == "ok", c
        assert c["gen_tokens_per_s"] > 0 and c["update_s_per_step"] > 0
        assert 0 <= c["engine_trainer_max_abs_logprob_diff"] < 1.0
        assert c["launcher"] == "accelerate" and c["handoff_s_per_iteration"] >= 0  # θ_k into the engine, timed
    assert "gpu" in res and res["gpu"]["skipped"]
