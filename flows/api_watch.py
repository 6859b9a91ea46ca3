"""What a flow does when its Prefect server goes away (issue 50, item 6): stop at the end of the stage,
with one line, instead of training on against a dead API.

Prefect's client rides out a dead API by retrying every call for about 80 s and then raises
(`httpx.ConnectError`, a 479-line traceback through the artifact call after the stage), while its
events client warns every 7 s; the temporary server `ts` starts never comes back, so `ts` used to sit
there for minutes. `ApiWatch` probes the server's /health once a second in a daemon thread:

- the temporary server (no PREFECT_API_URL): connection refused twice in a row means its process is
  gone, and it never comes back: lost;
- a server of the user's (a deployment's): no connection (refused: a restart; or unreachable) is ridden
  out for `OUTAGE_S`; still none after that: lost;
- either server: one that takes the connection but does not answer /health in time is alive and busy,
  and is ridden out for `BUSY_S`. Prefect's SQLite-backed server can stop answering for up to its
  SQLite busy timeout (60 s): seen after a restart, its event loop held while a write waited for the
  database lock (issue 53's CI failure); its own client waits for it, so the run does too.

The training flow (decorated with `stops_when_api_lost`) asks `stop_if_api_lost` at the end of every
stage, and makes its API calls between stages (artifacts) through `while_api_answers`; once the server
is lost, the stage has its manifest on disk, the flow closes the run (its lock, its processes) and the
process ends with one line and exit code 1, without waiting on the dead API. The same command (or the
same deployment run again with the same run_id) resumes the run at the next stage. docs/deployments.md,
"When the Prefect server goes away".
"""

from __future__ import annotations

import contextvars
import errno
import functools
import inspect
import logging
import os
import sys
import threading
import time

import httpx

__all__ = ["ApiLost", "ApiWatch", "stop_if_api_lost", "stops_when_api_lost", "while_api_answers"]

PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 2.0
REFUSED_PROBES = 2  # consecutive refused connections to the temporary server: nothing listens any more
OUTAGE_S = 30.0  # a user's server taking no connection for this long (a restart takes ~10-20 s): lost
BUSY_S = 120.0  # a server taking connections but answering none for this long (> SQLite's 60 s wait): lost


class ApiLost(Exception):
    """The Prefect server stopped answering; the message is the line to print."""


class _NoAnswer(Exception):
    """The server took the probe's connection but sent no answer within PROBE_TIMEOUT_S."""


def _get_health(api_url: str) -> None:
    """GET `api_url`/health: returns on a 2xx answer; raises _NoAnswer when connected but not answered in
    time, OSError (from httpx's error) when no connection was made (refused, unreachable, connect
    timeout) or the answer was an error or cut. httpx times the connect apart from the answer (only the
    second says the server is alive) and goes through the environment's proxy, as Prefect's client does."""
    try:
        status = httpx.get(f"{api_url}/health", timeout=PROBE_TIMEOUT_S).status_code
    except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
        raise _NoAnswer(f"no answer in {PROBE_TIMEOUT_S:.0f} s") from exc
    except httpx.HTTPError as exc:
        raise OSError(str(exc) or type(exc).__name__) from exc
    if not 200 <= status < 300:
        raise OSError(f"/health answered HTTP {status}")


def _refused(exc: BaseException | None) -> bool:
    """A refused connection anywhere in `exc`'s chain (httpx wraps the OSError)."""
    while exc is not None:
        if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class ApiWatch:
    """Probes `api_url`/health in a daemon thread until `close`; `lost` is None while the server answers."""

    def __init__(self, api_url: object, temporary: bool, resume: str = ""):  # a str, or the client's httpx.URL
        self.api_url = str(api_url).rstrip("/")
        self.temporary = temporary
        self.resume = resume  # how to resume the run, for the line
        self.last_stage = "its start"  # the last stage that ended (stop_if_api_lost), for the line
        self.lost: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # `_set_lost` (the probe's thread) against `close` (the flow's)
        self._closed = False
        self._silenced: list[tuple[logging.Handler, object]] = []
        self._thread = threading.Thread(target=self._probe, name="ts-api-watch", daemon=True)
        self._thread.start()

    def _probe(self) -> None:
        refused, failing_since, busy_since = 0, None, None
        while not self._stop.wait(PROBE_EVERY_S):
            try:
                _get_health(self.api_url)
                refused, failing_since, busy_since = 0, None, None
                continue
            except _NoAnswer as exc:  # connected: the server lives, and is busy
                refused, failing_since = 0, None
                busy_since = busy_since or time.monotonic()
                if time.monotonic() - busy_since >= BUSY_S:
                    self._set_lost(f"takes connections but has not answered for {BUSY_S:.0f} s ({exc})")
            except OSError as exc:  # no connection, or an error answer
                busy_since = None
                failing_since = failing_since or time.monotonic()
                refused = refused + 1 if _refused(exc) else 0
                if self.temporary and refused >= REFUSED_PROBES:
                    self._set_lost("refuses connections (its process is gone)")
                elif time.monotonic() - failing_since >= OUTAGE_S:
                    self._set_lost(f"has not answered for {OUTAGE_S:.0f} s ({exc})")

    def _set_lost(self, why: str) -> None:
        with self._lock:
            if self._closed:  # a probe under way when the flow ended: its run is over
                return
            self.lost = f"the Prefect server at {self.api_url} {why}"
            self._stop.set()
            self._silenced = _silence_prefect_logs()

    def close(self, restore_logs: bool = True) -> None:
        """Stop probing; `restore_logs`: let Prefect's loggers speak again, for a caller that goes on (a
        test, a notebook). A flow leaves them silent: after a lost server its process only ends, and
        Prefect's engine would spend its ~80 s of retries on the flow's final state printing failures."""
        with self._lock:
            self._closed = True
            self._stop.set()
            if restore_logs:
                for handler, drop in self._silenced:
                    handler.removeFilter(drop)
                self._silenced = []


def _drop(record: logging.LogRecord) -> bool:
    return False


def _silence_prefect_logs() -> list[tuple[logging.Handler, object]]:
    """Drop every record Prefect's loggers would print or send from now on: its events client reports
    a failure every 7 s, and its log handler would send to the dead API; the flow's one line says what
    happened. On the handlers: Prefect's internal loggers ignore levels (SafeLogger.isEnabledFor).
    Returns the (handler, filter) pairs added, for `ApiWatch.close` to take off."""
    manager = logging.Logger.manager
    loggers = [logging.getLogger()] + [
        lg
        for name, lg in list(manager.loggerDict.items())
        if name.startswith("prefect") and isinstance(lg, logging.Logger)
    ]
    handlers = {h for lg in loggers for h in lg.handlers}
    for handler in handlers:
        handler.addFilter(_drop)
    return [(h, _drop) for h in handlers]


_watch: ApiWatch | None = None  # the flow run's in this process (one at a time: a flow run holds its run's lock)


def stops_when_api_lost(fn):
    """Decorate a flow's function (under @flow): watch the flow's API while it runs, and end the process
    with ApiLost's line when a stage stopped for it (`stop_if_api_lost`)."""

    @functools.wraps(fn)
    def watched(*args, **kwargs):
        global _watch
        from prefect import get_client
        from prefect.settings import PREFECT_API_URL

        run_id = inspect.signature(fn).bind(*args, **kwargs).arguments.get("run_id", "")
        _watch = ApiWatch(get_client().api_url, temporary=not PREFECT_API_URL.value(), resume=_resume_hint(run_id))
        try:
            return fn(*args, **kwargs)
        except ApiLost as lost:
            _leave(lost)  # the run is closed (the with-blocks ran): no call to the dead API on the way out
        except Exception:
            if _watch.lost is None:
                raise
            # a Prefect call the flow made outside while_api_answers gave up retrying the lost server
            _leave(ApiLost(f"{_watch.lost}: the run stopped after {_watch.last_stage}; {_watch.resume}"))
        finally:
            _watch.close(restore_logs=False)
            _watch = None

    return watched


def stop_if_api_lost(stage: str, k: int) -> None:
    """Raise ApiLost if the flow's server is lost (`stage` of iteration `k` has just ended)."""
    if _watch is None:
        return
    _watch.last_stage = (
        "prepare" if stage == "prepare" else "the evaluation of θ_0" if k < 0 else f"{stage} of iteration {k}"
    )
    if _watch.lost is not None:
        raise ApiLost(f"{_watch.lost}: the run stopped after {_watch.last_stage}; {_watch.resume}")


def while_api_answers(call, *args, **kwargs):
    """`call(*args, **kwargs)` (a Prefect API call between stages: an artifact), given up with ApiLost as
    soon as the server is lost: Prefect's client retries a dead server for ~80 s. The call runs in a
    daemon thread with this thread's context (the flow run it belongs to); one left retrying ends with
    the process."""
    if _watch is None:
        return call(*args, **kwargs)
    out: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            out["value"] = call(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            out["error"] = exc
        finally:
            done.set()

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(run,), name="ts-api-call", daemon=True).start()
    while not done.wait(0.2):
        if _watch.lost is not None:
            raise ApiLost(f"{_watch.lost}: the run stopped after {_watch.last_stage}; {_watch.resume}")
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _resume_hint(run_id: str) -> str:
    """How to resume: asked while the server answers (prefect.runtime asks the API for a deployment's name)."""
    from prefect.context import FlowRunContext
    from prefect.runtime import deployment

    ctx = FlowRunContext.get()
    if ctx is not None and ctx.flow_run is not None and ctx.flow_run.deployment_id is not None:
        return f"run deployment {deployment.name} again with run_id={run_id} to resume"
    return f"the same command resumes run {run_id}"


def _leave(lost: ApiLost) -> None:
    """End the process with the line and exit code 1, now: the flow engine would report the flow's end
    to the dead API (80 s of retries, then a traceback)."""
    sys.stdout.flush()
    sys.stderr.write(f"error: {lost}\n")
    sys.stderr.flush()
    os._exit(1)
