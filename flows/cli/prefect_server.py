"""Prefect under `ts`: the temporary server in its own session (telemetry is off: flows/__init__.py).

Without a PREFECT_API_URL, Prefect starts a temporary local server (uvicorn) the first time a flow
talks to its API. Started by Prefect, that server shares the terminal's process group, so one Ctrl-C
kills it together with `ts`; the flow then spends two minutes retrying to report its end to a dead
server before it exits. `ts` therefore starts the server itself, before any flow runs:

- in its own session: the terminal's SIGINT reaches only `ts`, which ends the flow (its state reaches
  the server) and then stops the server;
- made to die with `ts` (PR_SET_PDEATHSIG in the child, and the child guard started first), so a
  kill -9 of `ts` at any moment, even before a run's lock, leaves no server holding its port.

Prefect then finds this server through its own registry of temporary servers (one per port;
`SubprocessASGIServer()` with no port returns ours) and never starts a second one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

__all__ = ["start_prefect", "stop_server"]


def start_prefect(verbose: bool = False) -> None:
    """Get this process ready to run a Prefect flow: the child guard, the temporary server (when no
    PREFECT_API_URL names one) in its own session, Prefect's log records kept to one line for a
    user's mistake and silent after a Ctrl-C (errors.py), and task runs' INFO lines off the console
    unless `verbose` (prefect_logs.py). Safe to call more than once."""
    from thinking_seeds.flows.cli.errors import quiet_prefect_logs
    from thinking_seeds.flows.prefect_logs import quiet_task_runs
    from thinking_seeds.store.child_guard import guard_children

    guard_children()  # first: whatever starts next dies with this process, kill -9 included
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE

    quiet_prefect_logs()
    quiet_task_runs(verbose)
    if PREFECT_API_URL.value() or not PREFECT_SERVER_ALLOW_EPHEMERAL_MODE.value():
        return  # the user's own server (or none allowed): Prefect's business
    _server_class()().start()


def stop_server() -> None:
    """Ask the temporary server this process started to stop (SIGTERM), without waiting for it."""
    if _CLASS is None:
        return
    for server in list(_CLASS._instances.values()):
        proc = getattr(server, "server_process", None)
        if isinstance(server, _CLASS) and proc is not None and proc.poll() is None:
            proc.terminate()


_CLASS: Any = None


def _server_class() -> Any:
    """Prefect's temporary server, its process started in a new session that dies with this one."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import prefect
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    from thinking_seeds.store.child_guard import die_with_parent

    class OwnSessionServer(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            # Prefect's own command (3.7 to 3.9: prefect/server/api/server.py), plus the session and the death signal.
            cmd = [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory"]
            cmd += ["prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port)]
            cmd += ["--log-level", "error", "--lifespan", "on"]
            return subprocess.Popen(
                cmd,
                env={
                    **os.environ,
                    "PREFECT_UI_ENABLED": "0",
                    "PREFECT__SERVER_EPHEMERAL": "1",
                    "PREFECT__SERVER_FINAL": "1",
                    **get_current_settings().to_environment_variables(exclude_unset=True),
                },
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

        def stop(self) -> None:
            # Prefect's stop, without its "Stopping temporary server" line at the end of every command.
            proc, self.server_process = self.server_process, None
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self._instances.pop(getattr(self, "_instance_key", self.port), None)
            self.running = False

    _CLASS = OwnSessionServer
    return _CLASS
