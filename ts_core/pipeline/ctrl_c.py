"""A Ctrl-C remembered as well as raised, so that one that something swallowed still stops the run.

Python runs a signal handler between two bytecodes of the main thread, wherever that thread is. In an
at-fork hook (logging registers one; Popen with preexec_fn runs them) or a finalizer, the KeyboardInterrupt
is only printed ("Exception ignored in ..."); in a callback of a library that computes in C (DuckDB reading
an Arrow schema) it comes back as that library's error. `ts` installs `on_sigint` (flows/cli/errors.py),
and the end of every stage asks `raise_if_interrupted()` (pipeline/loop.stage_outcome): a swallowed Ctrl-C
stops a run at the end of the stage it came in, in the plain loop and in the Prefect flow alike, where it
used to train on to the end and exit 0. A program that uses the library without `ts` keeps Python's own
handler, and nothing here changes for it.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["interrupted", "on_sigint", "raise_if_interrupted", "remember_ctrl_c"]

_seen = threading.Event()


def on_sigint(signum: int, frame: Any) -> None:
    _seen.set()
    raise KeyboardInterrupt


def remember_ctrl_c() -> None:
    """Forget an earlier Ctrl-C and install `on_sigint` (main thread, and only over Python's default handler)."""
    _seen.clear()
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) in (
        signal.default_int_handler,
        on_sigint,
    ):
        signal.signal(signal.SIGINT, on_sigint)


def interrupted() -> bool:
    """Whether a Ctrl-C came since `remember_ctrl_c`, raised or swallowed."""
    return _seen.is_set()


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C came, even if something swallowed it."""
    if _seen.is_set():
        raise KeyboardInterrupt
