"""A Ctrl-C that something swallows still ends `ts` (pipeline/ctrl_c.py): Python runs a signal handler
between bytecodes, and a KeyboardInterrupt raised inside an at-fork hook (logging registers one, and
Popen with preexec_fn runs them) or a finalizer is only printed as "Exception ignored". The handler
remembers the signal: `ts train` stops at the end of the stage it came in, with its one line and 130,
where it used to train to the end and exit 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

# The plain loop's first iteration forks once (as a Popen with preexec_fn does), and a terminal's
# Ctrl-C lands while the fork hooks run; the stage goes on as if nothing had happened.
_DRIVER = r"""
import os, signal, sys
from thinking_seeds.pipeline import loop

def ctrl_c_in_a_fork_hook():
    signal.raise_signal(signal.SIGINT)

real = loop.run_stage
def run_stage(s, stage, k):
    if (stage, k) == ("snapshot", 0):
        os.register_at_fork(before=ctrl_c_in_a_fork_hook)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        print("the stage went on", flush=True)
    return real(s, stage, k)
loop.run_stage = run_stage

from thinking_seeds.flows.cli import main
sys.argv = ["ts", *sys.argv[1:]]
main()
"""


def test_a_swallowed_ctrl_c_stops_the_run_at_the_end_of_its_stage(tmp_path, tiny_overrides):
    env = dict(os.environ, TS_RUNS_DIR=str(tmp_path), OMP_NUM_THREADS="1", COLUMNS="200")
    sets = [x for o in tiny_overrides for x in ("--set", o)]
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER, "train", "--run-id", "swallowed", "--no-prefect", *sets],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        # SIGINT's default action, as in a terminal (a test run in the background of a non-interactive
        # shell inherits SIG_IGN, and the raised SIGINT would do nothing)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert "Exception ignored" in out.stderr and "the stage went on" in out.stdout  # it was swallowed
    assert out.returncode == 130, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr.splitlines()[-1] == "error: interrupted (Ctrl-C); the same command resumes run swallowed"
    done = tmp_path / "swallowed" / "manifests" / "iteration=0"
    assert (done / "snapshot.json").exists() and not (done / "seeds.json").exists()  # stopped after its stage
