"""A trainer group on one machine listens on loopback only: the listening sockets of a 2-process gloo
group, launched with the command the trainer's launch uses (update_launcher.launch_prefix, here with
a stand-in worker, tests/helpers/ddp_listen.py), are all bound to 127.0.0.1 -- torch's rendezvous
store included, which accelerate's own launch opens on every interface."""

from __future__ import annotations

import ipaddress
import subprocess
import time

import psutil
import pytest

from tests.helpers import REPO
from thinking_seeds.config import load_config
from thinking_seeds.pipeline.update_launcher import LOOPBACK_LAUNCH_MODULE, launch_prefix


def _listening(root: psutil.Process) -> list[tuple[str, int]]:
    pids = {root.pid} | {c.pid for c in root.children(recursive=True)}
    return [
        (c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]


def test_a_two_process_group_binds_every_port_to_loopback(tmp_path, subprocess_env):
    cmd, cpu = launch_prefix(
        load_config("tiny", ["update.launcher=accelerate", "update.num_processes=2", "device=cpu"])
    )
    assert cpu and cmd[1:3] == ["-m", LOOPBACK_LAUNCH_MODULE]
    proc = subprocess.Popen(
        [*cmd, str(REPO / "tests" / "helpers" / "ddp_listen.py"), str(tmp_path)],
        env=subprocess_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        end = time.monotonic() + 120
        while not all((tmp_path / f"rank{r}").exists() for r in (0, 1)):
            if proc.poll() is not None:
                pytest.fail(f"the group exited ({proc.returncode}) before it met:\n{proc.stdout.read()[-3000:]}")
            assert time.monotonic() < end, "the group did not meet within 120 s"
            time.sleep(0.1)
        sockets = _listening(psutil.Process(proc.pid))
    finally:
        (tmp_path / "go").write_text("")
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    port = int(cmd[cmd.index("--main_process_port") + 1])
    assert port in {p for _, p in sockets}, sockets  # the rendezvous store is among them
    assert sockets and all(ipaddress.ip_address(ip).is_loopback for ip, _ in sockets), sockets
