"""A process of the run that died, in one line (transports/process_died.py): its signal or code, the likely
cause, a launcher's worker's status from torch's elastic summary; `ts` prints the line and the log's
tail under it, exit 2, no traceback (flows/cli/errors.py). The real kill -9: e2e/test_persistent_trainer.py."""

from __future__ import annotations

import pytest
import typer

from thinking_seeds.flows.cli.errors import EXIT_USER_ERROR, handled
from thinking_seeds.pipeline.trainer_client import TrainerDied
from thinking_seeds.transports.process_died import died, how_it_ended, log_tail

ELASTIC = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  time      : 2026-12-06_20:00:00
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
"""


def test_how_it_ended():
    assert how_it_ended(-9).startswith("killed by SIGKILL (out of host or GPU memory?")
    assert "`ts plan`" in how_it_ended(-9)
    assert how_it_ended(-11).startswith("killed by SIGSEGV (a crash in native code")
    assert how_it_ended(1) == "exit code 1" and how_it_ended(None) == "still running"
    assert how_it_ended(1, ELASTIC).startswith("killed by SIGKILL")  # the launcher's worker, from its summary
    assert how_it_ended(-200) == "killed by signal 200"


def test_ts_prints_one_line_then_the_log_tail_and_exits_2(capsys):
    log = "\n".join(f"step {i}" for i in range(20)) + "\n\n"
    e = died("persistent trainer (pid 4242) died in the update of iteration 2", how_it_ended(-9), "/r/trainer.log",
             log, "rerun the same command to resume the run", TrainerDied)  # fmt: skip
    with pytest.raises(typer.Exit) as caught, handled():
        raise e
    assert caught.value.exit_code == EXIT_USER_ERROR
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(
        "error: persistent trainer (pid 4242) died in the update of iteration 2: killed by SIGKILL"
    )
    assert "full log: /r/trainer.log; rerun the same command" in err[0]
    assert err[1:] == [f"  step {i}" for i in range(15, 20)] == log_tail(log).splitlines()
