"""The update under `accelerate launch` on CPU processes: the command runs gloo DDP
(`--multi_gpu --num_processes 2` + `Accelerator(cpu=True)`, docs/algorithm.md §7). The launched updates themselves
(the same θ_1 as in process, bf16, a kill -9 of the run stops its update): e2e/test_update_processes.py.
"""

from __future__ import annotations

from thinking_seeds.pipeline.trainer_client import trainer_command
from thinking_seeds.pipeline.update_launcher import accelerate_command


def test_accelerate_command_uses_gloo_ddp_on_cpu(verified_run, tmp_path):
    run, cfg = verified_run
    c = cfg.model_copy(deep=True)
    c.update.launcher, c.update.num_processes = "accelerate", 2
    cmd = accelerate_command(run, c, 0, tmp_path / "m.json", None)
    assert cmd[cmd.index("--num_processes") + 1] == "2" and "--multi_gpu" in cmd  # `--cpu` alone runs one
    assert "--cpu" in cmd[cmd.index("thinking_seeds.train.trainer") :]  # the trainer's flag: Accelerator(cpu=True)


def test_persistent_trainer_command_uses_gloo_ddp_on_cpu(verified_run, tmp_path):
    """The persistent trainer's launch: the same accelerate options, the server module, the run's
    policy folder in its command line (what `ps` and the orphan test look for)."""
    run, cfg = verified_run
    c = cfg.model_copy(deep=True)
    c.update.launcher, c.update.num_processes = "accelerate", 2
    cmd = trainer_command(run, c, tmp_path / "sock")
    assert cmd[cmd.index("--num_processes") + 1] == "2" and "--multi_gpu" in cmd
    tail = cmd[cmd.index("thinking_seeds.train.trainer_server") :]
    assert "--cpu" in tail and tail[tail.index("--out-root") + 1] == str(run.policy_root)
    assert tail[tail.index("--socket") + 1] == str(tmp_path / "sock")
