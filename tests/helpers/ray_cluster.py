"""A local Ray cluster for the tests of cluster=ray (tests/integration/test_ray.py), started and stopped by them.

`head_command` / `join_command` are the commands docs/scaling.md gives for a multi-node cluster, with
this machine's free ports filled in: the head runs `ray start --head --num-cpus 2 --port P ...`; another
machine would join with `ray start --address HEAD:P`. Each runs with `--block` in its own process group,
so the test stops exactly the processes it started (never `ray stop`, which stops every Ray on the
machine), and in its own short temp dir (Ray's socket paths must stay short).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def head_command(port: int, num_cpus: int = 2) -> list[str]:
    """The head node (docs/scaling.md): no dashboard, no usage stats; other ports free ones here."""
    return [
        RAY,
        "start",
        "--head",
        "--num-cpus",
        str(num_cpus),
        "--port",
        str(port),
        "--include-dashboard=false",
        "--disable-usage-stats",
    ]


def join_command(address: str, num_cpus: int = 2) -> list[str]:
    """Another machine joining the head at `address` (docs/scaling.md)."""
    return [RAY, "start", "--address", address, "--num-cpus", str(num_cpus), "--disable-usage-stats"]


# The driver's cluster keys of docs/scaling.md (`ts train ... --set cluster.kind=ray --set rollout.workers=2
# --set reward.workers=2`, RAY_ADDRESS in the environment).
DRIVER_SETS = ["cluster.kind=ray", "rollout.workers=2", "reward.workers=2"]
# Its run id: a run's rows carry their id, so the tests' single-process reference run has the same one.
DRIVER_RUN_ID = "tiny"
DOC_PORT = 6379  # the docs' port; the tests take a free one (two clusters on one host must not collide)


# docs/scaling.md's deployment run against the cluster (`prefect deployment run train/train --param run_id=big
# --param 'overrides=[...]' --watch`, the process worker with RAY_ADDRESS): e2e/test_deployment.py.
DEPLOYMENT_RUN_ID = "big"
DEPLOYMENT_SETS = list(DRIVER_SETS)


def driver_args(extra_sets: list[str] = ()) -> list[str]:
    """What follows `ts` in docs/scaling.md's driver line; the tests append the tiny run's overrides."""
    sets = [*DRIVER_SETS, *extra_sets]
    return ["train", "--preset", "tiny", "--run-id", DRIVER_RUN_ID, *[a for o in sets for a in ("--set", o)]]


def _own_ports() -> list[str]:
    """Ports with fixed defaults, moved to free ones: two clusters on one machine must not collide."""
    return [
        "--ray-client-server-port",
        str(free_port()),
        "--dashboard-agent-listen-port",
        str(free_port()),
        "--dashboard-agent-grpc-port",
        str(free_port()),
        "--runtime-env-agent-port",
        str(free_port()),
        "--metrics-export-port",
        str(free_port()),
    ]


@dataclass
class LocalCluster:
    address: str
    temp_dir: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 20)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Workers the raylet started may have outlived it by a moment: they share its process group.
        time.sleep(0.5)
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def log_tail(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in self.logs if p.exists())


def _wait_up(address: str, proc: subprocess.Popen, log: Path, timeout: float = 180.0) -> None:
    host, port = address.rsplit(":", 1)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        if "Ray runtime started" in log.read_text(errors="replace"):
            with socket.socket() as s:
                if s.connect_ex((host, int(port))) == 0:
                    return
        time.sleep(0.5)
    raise RuntimeError(f"ray start did not come up within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def start_local_cluster(env: dict[str, str], num_cpus: int = 2) -> LocalCluster:
    """`ray start --head --num-cpus 2 --port <free>` (blocking, own process group), up and listening."""
    temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's unix socket paths
    port = free_port()
    cluster = LocalCluster(f"127.0.0.1:{port}", temp_dir)
    env = {**env, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    log = temp_dir / "head.log"
    cmd = head_command(port, num_cpus) + ["--node-ip-address", "127.0.0.1", "--temp-dir", str(temp_dir / "t")]
    cmd += _own_ports() + ["--block"]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    cluster.procs.append(proc)
    cluster.logs.append(log)
    try:
        _wait_up(cluster.address, proc, log)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextmanager
def running_cluster(env: dict[str, str], num_cpus: int = 2) -> Iterator[LocalCluster]:
    """A local cluster for a test module; on the way out the run's Ray pools, this process's Ray
    client and the cluster's processes are closed, in that order."""
    cluster = start_local_cluster(env, num_cpus=num_cpus)
    try:
        yield cluster
    finally:
        from thinking_seeds.pipeline.session import close_ray_pools

        close_ray_pools()
        import ray

        ray.shutdown()
        cluster.stop()


def join_local_node(cluster: LocalCluster, env: dict[str, str], num_cpus: int = 2) -> subprocess.Popen:
    """A second node on this machine, joined with `ray start --address HEAD:P` (docs/scaling.md's command
    for another machine), in the head's temp dir; `cluster.stop()` stops it too. Returns once the
    cluster counts it."""
    env = {**env, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    log = cluster.temp_dir / f"node{len(cluster.procs)}.log"
    cmd = join_command(cluster.address, num_cpus) + ["--node-ip-address", "127.0.0.1", "--temp-dir"]
    cmd += [str(cluster.temp_dir / "t"), "--dashboard-agent-listen-port", str(free_port()), "--block"]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    cluster.procs.append(proc)
    cluster.logs.append(log)
    return proc


def stop_node(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 20)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
