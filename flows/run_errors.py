"""One line per user error in a flow run, wherever it runs: under `ts`, or in a deployment's worker.

A flow that raises makes Prefect's engine log the exception with its whole traceback three times: the
flow run's "Encountered exception during execution", the engine's "Engine execution exited with
unexpected exception" (both in the flow-run log the UI shows), and the engine process's own "Execution
of flow run ... exited" on its terminal, which a process worker prints: 82 lines for one bad value of
`overrides`. `user_errors_in_one_line` wraps a flow's function: a user's mistake (the errors `ts` says
in one line, flows/cli/errors.py `is_user_error`) is logged once through the run logger, at ERROR, and
the flow returns a Failed state with that line as its message (Prefect's way to end a run as failed
without an exception in the engine). The exception is the state's data, so a caller in the same process
(`ts train` calls the flow) still gets it raised and says it in its one line.

Prefect's engine then raises that exception again to end the process with code 1; `ReportedOnce` drops
the records that would repeat the line (the two "exited with unexpected exception" ones and "Finished in
state Failed(...)"). A task run's user error keeps its one-line message and loses its traceback
(`quiet_user_error_tracebacks`). Bugs keep every traceback, and TS_DEBUG=1 keeps Prefect's records as
they are.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

from prefect import get_run_logger
from prefect.states import Failed

from thinking_seeds.flows.cli.errors import is_user_error, quiet_user_error_tracebacks, user_error_text

F = TypeVar("F", bound=Callable[..., Any])

_reported_errors: dict[int, BaseException] = {}  # id -> exception: said once by the flow (kept alive: ids stay unique)
_reported_runs: set[str] = set()  # flow run ids whose user error was said


class ReportedOnce(logging.Filter):
    """On Prefect's flow-run and engine loggers: drops the records that repeat a user error the flow
    has said (its traceback, again, and the final state's message, again)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if os.environ.get("TS_DEBUG"):
            return True
        # the exception, or the one an earlier filter took off the record with its traceback
        exc = record.exc_info[1] if record.exc_info else getattr(record, "ts_exception", None)
        if exc is not None and id(exc) in _reported_errors:
            return False  # "Engine execution exited with unexpected exception" and the engine's own
        return not (
            str(getattr(record, "flow_run_id", "")) in _reported_runs
            and str(record.msg).startswith("Finished in state Failed")
        )


REPORTED_LOGGERS = ("prefect.flow_runs", "prefect.engine")


def _install_filters() -> None:
    quiet_user_error_tracebacks()  # a task run's user error: its message, without the stack
    for name in REPORTED_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, ReportedOnce) for f in log.filters):
            log.addFilter(ReportedOnce())


def user_errors_in_one_line(fn: F) -> F:
    """Decorate a flow's function (under `@flow`): a user error ends the run Failed with one line."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        _install_filters()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if os.environ.get("TS_DEBUG") or not is_user_error(e):
                raise
            line, details = user_error_text(e)
            from prefect.runtime import flow_run

            _reported_errors[id(e)] = e
            _reported_runs.add(str(flow_run.id))
            # ts_user_error: `ts` prints the line itself and keeps this record off its terminal
            said = f"{line}\n\n{details}" if details else line  # a comparison's failed runs: their log tails
            get_run_logger().error("%s", said, extra={"ts_user_error": True})
            return Failed(message=line, data=e)

    # Prefect validates a flow's parameters against the signature it reads through __wrapped__, with
    # the string annotations of `from __future__ import annotations`, and resolves them in the globals
    # of the function it was given: this module's, where ComparisonSpec is not. The signature with its
    # annotations already evaluated in the flow's own module needs no resolving.
    try:
        run.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    except NameError:  # an annotation only imported under TYPE_CHECKING: Prefect resolves it as before
        pass
    return run  # type: ignore[return-value]
