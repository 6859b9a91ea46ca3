"""A `ts` command interrupted as a terminal does it: started in its own session (its own process
group, like a shell job), then SIGINT to the whole group once its children are up. What the tests
of Ctrl-C measure: seconds to exit, the exit code, the lines printed, and which processes outlived it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

TS = [sys.executable, "-m", "thinking_seeds.flows.cli"]


@dataclass
class Interrupted:
    seconds: float  # from the SIGINT to the exit of `ts`
    code: int
    output: str  # stdout + stderr after the SIGINT
    before: str  # and before it
    survivors: list[str]  # command lines of descendants still alive 10 s after the exit

    @property
    def lines(self) -> list[str]:
        return [line for line in self.output.splitlines() if line.strip()]


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_when(
    args: list[str], ready, env: dict, cwd: Path, timeout: float = 600.0, kill_main: bool = False, act=None
) -> Interrupted:
    """Run `ts *args`; once `ready(command lines of its descendants, output so far)` holds, SIGINT its
    group (a terminal's Ctrl-C), or with `kill_main` SIGKILL its main process alone (kill -9 PID), or
    call `act(its descendants)` (kill one of them). `seconds` counts from then to the exit of `ts`."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            TS + args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            text=True,
            # A terminal's foreground job takes SIGINT's default action; a test run started in the
            # background of a non-interactive shell (`make test-slow &`) hands SIG_IGN down instead,
            # and `ts` would rightly ignore the Ctrl-C
            preexec_fn=_sigint_default,
        )
        me = psutil.Process(proc.pid)
        kids: list[psutil.Process] = []
        try:
            deadline = time.monotonic() + timeout
            while True:
                out.seek(0)
                text = out.read()
                kids = _children(me)
                if ready([_cmd(k) for k in kids], text):
                    break
                assert proc.poll() is None, f"ts exited ({proc.returncode}) before it was ready:\n{text[-3000:]}"
                assert time.monotonic() < deadline, f"not ready after {timeout} s:\n{text[-3000:]}"
                time.sleep(0.2)
            kids = _children(me)  # everything it started, the guard included
            before = len(text)
            t0 = time.monotonic()
            if act is not None:
                act(kids)
            elif kill_main:
                os.kill(proc.pid, signal.SIGKILL)
            else:
                os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
            try:
                code = proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                code = -1
            seconds = time.monotonic() - t0
            end = time.monotonic() + 10.0
            while time.monotonic() < end and any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids):
                time.sleep(0.1)
            survivors = [_cmd(k) for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
            out.seek(0)
            text = out.read()
            return Interrupted(seconds, code, text[before:], text[:before], survivors)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            for k in kids:  # whatever outlived it (a failed test): not left for the next one
                try:
                    k.kill()
                except psutil.Error:
                    pass
