"""Issue #52 item 3: the trainer's `accelerate launch` ignores the user's accelerate defaults and counts GPUs
the way this process sees them.

- A hostile default config in $HF_HOME/accelerate/default_config.yaml (multi-GPU on one GPU id, fp16) made the
  one-process trainer fail with "Less than two GPU ids" (or reshaped it silently); every launch now passes the
  neutral config (data/accelerate_neutral.yaml) with --config_file. Checked on a real CPU launch in a fresh
  process (accelerate finds its default file from HF_HOME when it is imported).
The launch command and the GPU ids under CUDA_VISIBLE_DEVICES: unit/test_accelerate_launch.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import REPO

HOSTILE = """compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_processes: 2
gpu_ids: '0'
mixed_precision: fp16
use_cpu: false
"""

DRIVER = r"""
import json, os, subprocess, sys
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.update_launcher import launch_env, launch_prefix, without_launcher
probe = sys.argv[1]
cmd, cpu = launch_prefix(load_config("tiny", ["device=cpu"]))
cmd += [probe]
direct, _ = without_launcher(cmd, launch_env())
r = subprocess.run(cmd, env=launch_env(), capture_output=True, text=True, timeout=120)
print(json.dumps({"rc": r.returncode, "out": r.stdout, "err": r.stderr[-2000:], "shortcut": direct[1] == probe}))
"""

PROBE = """import json, os
print(json.dumps({k: v for k, v in os.environ.items() if k.startswith("ACCELERATE_") or k == "WORLD_SIZE"}))
"""


def test_a_hostile_default_accelerate_config_is_never_read(tmp_path):
    (tmp_path / "hf" / "accelerate").mkdir(parents=True)
    (tmp_path / "hf" / "accelerate" / "default_config.yaml").write_text(HOSTILE)
    (tmp_path / "probe.py").write_text(PROBE)
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path / "probe.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["rc"] == 0, res["err"]  # before: "Less than two GPU ids were configured ..."
    child = json.loads(res["out"].strip().splitlines()[-1])
    assert child["ACCELERATE_MIXED_PRECISION"] == "no"  # ours, not the file's fp16
    assert "ACCELERATE_USE_FSDP" not in child and "ACCELERATE_USE_DEEPSPEED" not in child
    assert child.get("WORLD_SIZE", "1") == "1"
    assert res["shortcut"]  # one process still starts without the launcher's interpreter in between
