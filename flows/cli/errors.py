"""The one error handler of `ts`: every command (and subcommand) runs inside it.

A mistake the user can fix ends in ONE line on stderr -- what was wrong, where, how to fix it --
and exit code 2, never a traceback: ts_core's ConfigError / DataError / CheckpointError /
ModelError / QueryError and any other ValueError (pydantic's ValidationError among them), a path
that is a folder, a file or nothing where it must not be (IsADirectoryError and kin: `_PATH_ERRORS`),
RunLockedError, DuckDB errors, a comparison whose runs failed (CompareError: the line, then the
failed runs' log tails), a process of the run that died (ProcessDied, transports/process_died.py: the
line, then its log's last lines), and click's usage errors (a missing or bad option). Ctrl-C is one line
and the shell's 130. TS_DEBUG=1 shows the traceback instead.

Ctrl-C is remembered as well as raised: a library that computes in C (DuckDB, pyarrow) may turn the
KeyboardInterrupt into its own error, which a caller then reads as a damaged file or an unparsable
query and goes on -- so a Ctrl-C during `ts sql`'s setup could exit 2 with a DuckDB message, or be
lost and leave a never-ending query running. Any error after a Ctrl-C is reported as the Ctrl-C,
and a command can ask `raise_if_interrupted()` at a point where a swallowed one must stop it.
"""

from __future__ import annotations

import copy as _copy
import errno
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import typer
from typer.core import TyperGroup

from thinking_seeds.flows.cli.output import detail_lines, error_line
from thinking_seeds.pipeline.ctrl_c import interrupted, raise_if_interrupted, remember_ctrl_c

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def _loaded_class(module: str, name: str) -> type | None:
    """A class from a module only if that module is already loaded (it must be, if the class was
    raised): no torch import just to catch."""
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


# A path that names the wrong kind of thing, or nothing: the user's mistake (a folder given as --out, a
# file given as a folder, a typo). Other OSErrors (a full disk, a failing drive) are not, and keep theirs.
_PATH_ERRORS = {
    IsADirectoryError: "give the path of a file, not a folder",
    NotADirectoryError: "a part of the path is a file, not a folder; fix the path",
    FileNotFoundError: "check the path",
    FileExistsError: "it is in the way (a file where a folder is needed?); use another path or move it",
    # a runs dir entry (or any path) this user may not read: its owner's to fix, not a bug of ts
    PermissionError: "this user may not use it; fix its permissions (chmod/chown), or move it out of the runs folder",
}

# What a command writes to, for the line a full disk ends it with (`writing_to`): (place, what to do).
_WRITING: list[tuple[str, str]] = []


def writing_to(place: str | os.PathLike[str], again: str) -> None:
    """Note where the running command writes and how a rerun continues, for the one line a full disk
    (ENOSPC) ends it with: `ts train` (the run directory; a rerun resumes) and `ts export` (--out)."""
    _WRITING.append((os.fspath(place), again))


def _disk_full(e: BaseException) -> OSError | None:
    """The ENOSPC error behind `e` (itself, its cause or context: safetensors and pyarrow wrap it), or None."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and (e.errno == errno.ENOSPC or "No space left on device" in str(e)):
            return e
        if "No space left on device" in str(e):  # SafetensorError and kin carry only the text
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        e = e.__cause__ or e.__context__
        seen += 1
    return None


def _disk_full_line(e: OSError) -> str:
    path = e.filename2 if e.filename2 is not None else e.filename
    place, again = _WRITING[-1] if _WRITING else (None, "free space and run the command again")
    where = os.fsdecode(path) if path is not None else place
    at = f" while writing {where}" if where else ""
    return (
        f"the disk is full (no space left on device){at}: nothing written before was lost (every file is "
        f"written whole or not at all); free space there and {again}"
    )


def is_user_error(e: BaseException) -> bool:
    if isinstance(e, ValueError):  # ConfigError, DataError, CheckpointError, ModelError, QueryError, ValidationError
        return True
    if isinstance(e, tuple(_PATH_ERRORS)) or _disk_full(e) is not None:
        return True
    for module, name in (
        ("thinking_seeds.store.run_dir", "RunLockedError"),
        ("duckdb", "Error"),
        ("thinking_seeds.experiments.jobs", "CompareError"),
        ("thinking_seeds.transports.process_died", "ProcessDied"),
    ):
        cls = _loaded_class(module, name)
        if cls is not None and isinstance(e, cls):
            return True
    return False


class _MessageOnlyForUserErrors(logging.Filter):
    """Prefect logs a failed task's and flow's exception with its whole traceback (~100 lines for one
    bad reward function); for a user's mistake `ts` ends with the one line that says it, so Prefect's
    records keep their one-line message and lose the stack. Bugs keep theirs; TS_DEBUG=1 keeps all."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_user_error(exc) and not os.environ.get("TS_DEBUG"):
            record.exc_info, record.exc_text = None, None
            record.ts_user_error = True  # for the console: `ts` prints this one itself (_QuietConsole)
            record.ts_exception = exc  # which one it was, for the filters after this one (flows/run_errors.py)
        return True


PREFECT_RUN_LOGGERS = ("prefect.task_runs", "prefect.flow_runs")


def quiet_user_error_tracebacks() -> None:
    """Install `_MessageOnlyForUserErrors` on Prefect's task- and flow-run loggers (once)."""
    for name in PREFECT_RUN_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, _MessageOnlyForUserErrors) for f in log.filters):
            log.addFilter(_MessageOnlyForUserErrors())


def exit_interrupted() -> None:
    """End the `ts` process after a Ctrl-C, now. The command's own cleanup has run as the interrupt
    unwound it (run lock, persistent trainer, the flow's final state); what is left is stopped here
    (trackers flushed, verifier pools, the temporary Prefect server, in that order), and the interpreter's
    teardown is skipped: joining executor threads and finalizing torch took 5-10 s on a loaded machine.
    Anything else this process started is in the child guard's hands. Only the real CLI calls this
    (flows/cli/__init__.py main); in-process callers of `handled` get typer.Exit(130)."""
    for module, name in (
        # the user's trackers flush what they hold; the verifier pools are killed
        ("thinking_seeds.pipeline.run_resources", "stop_at_interrupt"),
        ("thinking_seeds.flows.cli.prefect_server", "stop_server"),
    ):
        stop = getattr(sys.modules.get(module), name, None)
        if stop is not None:
            with suppress(Exception):  # leaving anyway; the guard stops what is left
                stop()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(EXIT_INTERRUPTED)


class _SilentAfterCtrlC(logging.Filter):
    """After a Ctrl-C, Prefect's records ("Crash detected! Execution was aborted by an interrupt
    signal", "Finished in state Crashed()") say nothing the one `interrupted` line does not; the
    flow's state still reaches the server (the UI shows it Crashed). TS_DEBUG=1 keeps them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (interrupted() and record.name.startswith("prefect") and not os.environ.get("TS_DEBUG"))


class _QuietConsole(logging.Filter):
    """On the terminal only (the API keeps every record): a user's mistake is the one line `ts` prints,
    so Prefect's "Encountered exception ... CheckpointError(...)" and the "Finished in state Failed(...)"
    records that follow it stay off the console; so do the "Finished in state Skipped(...)" of a
    resumed run's done stages (one resume line says it), and a flow's record marked `ts_printed`
    (the resume line: `ts train` printed it first)."""

    seen_user_error = False

    def filter(self, record: logging.LogRecord) -> bool:
        if os.environ.get("TS_DEBUG"):
            return True
        if getattr(record, "ts_user_error", False):
            _QuietConsole.seen_user_error = True
            return False
        if getattr(record, "ts_printed", False):
            return False  # a flow's line that `ts` printed itself (the resume line) before the flow started
        if record.name == "prefect.task_runs" and record.getMessage().startswith("Finished in state Skipped("):
            return False  # a resumed run's done stages: `ts train` says it in one line (pipeline/resume.py)
        if _QuietConsole.seen_user_error and record.name in PREFECT_RUN_LOGGERS:
            return not record.getMessage().startswith("Finished in state Failed")
        return True


def quiet_prefect_logs() -> None:
    """One line for a user's mistake and none after a Ctrl-C: filters on Prefect's run loggers
    (`quiet_user_error_tracebacks`, `_SilentAfterCtrlC`) and on the console handlers Prefect's
    records reach (the root logger's and `prefect`'s: Prefect has set them up once prefect.main is
    imported), once each."""
    import prefect.main  # noqa: F401 - Prefect's logging configuration: its console handlers exist after it

    quiet_user_error_tracebacks()
    for name in PREFECT_RUN_LOGGERS:  # the flow's and tasks' records ("Crash detected!") are logged here
        log = logging.getLogger(name)
        if not any(isinstance(f, _SilentAfterCtrlC) for f in log.filters):
            log.addFilter(_SilentAfterCtrlC())
    for name in ("", "prefect"):  # and what other Prefect loggers print
        for h in logging.getLogger(name).handlers:
            for kind in (_SilentAfterCtrlC, _QuietConsole):
                if not any(isinstance(f, kind) for f in h.filters):
                    h.addFilter(kind())


def _click_exceptions() -> Any:
    try:  # typer >= 0.20 carries its own copy of click
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older typer on click
        from click import exceptions
    return exceptions


def _with_details() -> tuple[type, ...]:
    """The errors whose message is a line, a blank line and supporting text (log tails) to print under it."""
    found = (
        _loaded_class("thinking_seeds.experiments.jobs", "CompareError"),
        _loaded_class("thinking_seeds.transports.process_died", "ProcessDied"),
    )
    return tuple(c for c in found if c is not None)


def _path_error_line(e: OSError) -> str:
    """A path error as one line: the path (the target of a rename, not its temporary source), what is
    wrong with it, how to fix it. One raised with a message of its own keeps that message."""
    path = e.filename2 if e.filename2 is not None else e.filename
    if path is None:
        return str(e)
    hint = next(h for cls, h in _PATH_ERRORS.items() if isinstance(e, cls))
    return f"{os.fsdecode(path)}: {(e.strerror or type(e).__name__).lower()}; {hint}"


def user_error_text(e: BaseException) -> tuple[str, str]:
    """What `ts` says of a user error (`is_user_error`): one line (a path error's path, what is wrong with
    it and how to fix it; any other message with its line breaks made spaces), and the details to print
    under it (a CompareError's failed runs' or a ProcessDied's log tails, after its blank line; otherwise none)."""
    text = _path_error_line(e) if isinstance(e, OSError) else str(e) or type(e).__name__
    details = ""
    if isinstance(e, _with_details()):
        text, _, details = text.partition("\n\n")
    return " ".join(text.split()), details


def _usage_line(e: Any) -> str:
    """click's usage error as one line, with the help command to read."""
    ctx = getattr(e, "ctx", None)
    path = []
    while ctx is not None:
        path.append(ctx.info_name or "")
        ctx = ctx.parent
    where = " ".join(["ts", *reversed(path[:-1])]) if path else "ts"
    return f"{where}: {e.format_message()} (see `{where} --help`)"


@contextmanager
def handled() -> Iterator[None]:
    """Turn a user's mistake into one line and exit code 2 (Ctrl-C: one line, 130)."""
    remember_ctrl_c()
    try:
        yield
        raise_if_interrupted()  # a Ctrl-C swallowed on the way (in a fork hook or a finalizer) still ends it so
    except KeyboardInterrupt as e:  # a command may say what was interrupted: raise KeyboardInterrupt(msg)
        if os.environ.get("TS_DEBUG"):
            raise
        error_line(str(e) or "interrupted (Ctrl-C)")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as e:
        if os.environ.get("TS_DEBUG"):
            raise
        exc = _click_exceptions()
        if isinstance(e, exc.UsageError) and not isinstance(e, exc.NoArgsIsHelpError):
            error_line(_usage_line(e))
            raise typer.Exit(EXIT_USER_ERROR) from None
        if interrupted() and not isinstance(e, typer.Exit):  # a Ctrl-C that a library wrapped
            error_line("interrupted (Ctrl-C)")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if (full := _disk_full(e)) is not None:
            error_line(_disk_full_line(full))
            raise typer.Exit(EXIT_USER_ERROR) from None
        if not is_user_error(e):
            raise  # a bug (or typer.Exit, click's help): as it is
        head, details = user_error_text(e)
        error_line(head)
        if details:
            detail_lines(details)
        raise typer.Exit(EXIT_USER_ERROR) from None


def _global_option_of_command(option: Any) -> Any:
    """A copy of a top-level option for a command (`ts eval X --runs-dir D`): no value of its own, its
    callback sets what the top-level one sets (the environment variable it reads)."""
    copy = _copy.copy(option)
    copy.expose_value, copy.envvar, copy.is_eager = False, None, True

    def apply(ctx: Any, param: Any, value: Any) -> Any:
        if value is not None and option.envvar:
            os.environ[option.envvar if isinstance(option.envvar, str) else option.envvar[0]] = str(value)
        return value

    copy.callback = apply
    return copy


class Group(TyperGroup):
    """The top-level group: parsing its own options and invoking every command happen inside `handled`;
    its options are accepted after the command too (`ts eval X --runs-dir D`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        todo = list(self.commands.values())
        while todo:
            cmd = todo.pop()
            todo += list(getattr(cmd, "commands", {}).values())  # a command group's commands (ts config ...)
            names = {p.name for p in cmd.params}
            cmd.params += [_global_option_of_command(p) for p in self.params if p.name not in names]

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with handled():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with handled():
            return super().invoke(ctx)
