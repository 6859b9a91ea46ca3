"""What Prefect prints on the terminal under `ts`: the flow's own lines, not every task run's.

A training run is a flow of ~7 task runs per iteration, and Prefect logs each task run's end at INFO
("Task run 'seeds-3' - Finished in state Completed()"): 141 such lines for the 20-iteration demo,
around the one line per iteration the flow itself logs. `quiet_task_runs` keeps the task runs' INFO
records off the console (they still reach Prefect's API, so the UI shows every task run and its state);
`ts train --verbose` prints them. Warnings and errors of task runs always print.

Prefect's console handler writes to the stderr stream it was given when logging was configured, behind
the back of a rich progress bar drawn on the same terminal: a log line then continues the bar's line
(`… 1/302 0:00:0014:43:09.951 | INFO | Flow run …`). `prefect_console(console)` points the handler at
the progress bar's own console while the bar is live, so rich prints each log line above the bar.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["TaskRunChatter", "prefect_console", "prefect_console_handlers", "quiet_task_runs"]

TASK_RUN_LOGGER = "prefect.task_runs"


class TaskRunChatter(logging.Filter):
    """Drops the INFO (and lower) records of Prefect's task-run loggers that report a task run's own
    life ('Finished in state ...'). Warnings and errors pass, and so does what a stage prints: the flow
    runs with log_prints, so an evaluation's progress lines reach this handler as task-run INFO records."""

    def filter(self, record: logging.LogRecord) -> bool:
        is_task_run = record.name == TASK_RUN_LOGGER or record.name.startswith(TASK_RUN_LOGGER + ".")
        if not is_task_run or record.levelno >= logging.WARNING:
            return True
        return not str(record.getMessage()).startswith(LIFECYCLE)


# how Prefect's engine words a task run's own INFO lines (3.x: 'Finished in state Completed()'; the
# others at DEBUG today, dropped too should a version raise them)
LIFECYCLE = ("Finished in state", "Created task run", "Executing", "Submitting task run", "Beginning")


def prefect_console_handlers() -> list[Any]:
    """Every PrefectConsoleHandler attached to a logger (Prefect's logging configuration puts them on
    the root and `prefect` loggers; a user's logging.yml may put them elsewhere)."""
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    seen: dict[int, Any] = {}
    for lg in loggers:
        for h in lg.handlers:
            if isinstance(h, PrefectConsoleHandler):
                seen[id(h)] = h
    return list(seen.values())


def quiet_task_runs(verbose: bool = False) -> None:
    """Keep task runs' INFO lines off the console (`verbose`: print them, as Prefect does). Idempotent."""
    for h in prefect_console_handlers():
        mine = [f for f in h.filters if isinstance(f, TaskRunChatter)]
        if verbose:
            for f in mine:
                h.removeFilter(f)
        elif not mine:
            h.addFilter(TaskRunChatter())


@contextmanager
def prefect_console(console: Any) -> Iterator[None]:
    """While inside, Prefect's console handlers print through `console` (a live progress bar's), so
    their lines go above the bar instead of onto its line; their own consoles come back after."""
    handlers = prefect_console_handlers()
    before = [h.console for h in handlers]
    for h in handlers:
        h.console = console
    try:
        yield
    finally:
        for h, c in zip(handlers, before, strict=True):
            h.console = c
