"""flows/api_watch.py against a real HTTP server on loopback that answers /health, then goes away or
hangs: the temporary server is lost after two refused probes, a user's server only after OUTAGE_S of
refused connections (a restart shorter than that is ridden out), and either one that takes connections
but answers nothing (a busy server: Prefect's SQLite-backed server waits up to 60 s for its database
lock) only after BUSY_S. Probes every 0.1 s here (1 s in a run). The line a stage's end prints, and the
exit: tests/e2e/test_ctrl_c_prefect.py."""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from thinking_seeds.flows import api_watch
from thinking_seeds.flows.api_watch import ApiWatch

HUNG = threading.Event()  # set: the server takes each connection and reads the request, answers nothing


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        while HUNG.is_set():
            time.sleep(0.01)
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def _serve(port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


def _lost_within(watch: ApiWatch, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while watch.lost is None and time.monotonic() < end:
        time.sleep(0.02)
    return watch.lost is not None


@pytest.fixture(autouse=True)
def fast_probes(monkeypatch):
    monkeypatch.setattr(api_watch, "PROBE_EVERY_S", 0.1)
    monkeypatch.setattr(api_watch, "PROBE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(api_watch, "OUTAGE_S", 0.6)
    monkeypatch.setattr(api_watch, "BUSY_S", 1.2)
    HUNG.clear()
    yield
    HUNG.clear()


def test_the_temporary_server_gone_is_lost_after_two_refused_probes():
    server = _serve()
    watch = ApiWatch(f"http://127.0.0.1:{server.server_port}/api/", temporary=True)
    try:
        assert not _lost_within(watch, 0.5)  # it answers
        _stop(server)
        t0 = time.monotonic()
        assert _lost_within(watch, 2.0)
        assert time.monotonic() - t0 < 0.5  # two probes 0.1 s apart, not OUTAGE_S
        where = f"http://127.0.0.1:{server.server_port}/api"
        assert watch.lost == f"the Prefect server at {where} refuses connections (its process is gone)"
    finally:
        watch.close()


def test_a_users_server_restart_is_ridden_out_and_a_longer_outage_is_not():
    server = _serve()
    port = server.server_port
    watch = ApiWatch(f"http://127.0.0.1:{port}/api", temporary=False)
    try:
        _stop(server)
        assert not _lost_within(watch, 0.4)  # refused, but a restart may bring it back
        server = _serve(port)  # back within OUTAGE_S
        assert not _lost_within(watch, 0.8)  # the outage clock restarted
        _stop(server)
        assert _lost_within(watch, 2.0)
        assert "has not answered for 1 s" in watch.lost  # OUTAGE_S, rounded
    finally:
        watch.close()


@pytest.mark.parametrize("temporary", [True, False], ids=["temporary-server", "users-server"])
def test_a_server_that_takes_connections_but_does_not_answer_is_busy_until_busy_s(temporary):
    server = _serve()
    watch = ApiWatch(f"http://127.0.0.1:{server.server_port}/api", temporary=temporary)
    try:
        assert not _lost_within(watch, 0.2)
        HUNG.set()  # as Prefect's server whose event loop waits on its database lock
        assert not _lost_within(watch, 0.9)  # 1.5 OUTAGE_S: not lost, it is alive
        HUNG.clear()  # it answers again: the busy clock restarts
        assert not _lost_within(watch, 0.4)
        HUNG.set()
        t0 = time.monotonic()
        assert _lost_within(watch, 3.0)
        assert time.monotonic() - t0 >= 1.2 - 0.3  # BUSY_S, less the probe under way when it hung
        assert "takes connections but has not answered for 1 s (no answer in 0 s)" in watch.lost
    finally:
        HUNG.clear()
        watch.close()
        _stop(server)


def test_an_error_answer_counts_as_an_outage_not_as_busy():
    server = _serve()
    watch = ApiWatch(f"http://127.0.0.1:{server.server_port}/wrong", temporary=False)  # /wrong/health: 404
    try:
        assert _lost_within(watch, 2.0)
        assert "has not answered for 1 s (/health answered HTTP 404)" in watch.lost
    finally:
        watch.close()
        _stop(server)


def test_a_lost_server_silences_the_logs_until_close_and_a_probe_after_close_sets_nothing(caplog, monkeypatch):
    log = logging.getLogger("api_watch_test")
    server = _serve()
    watch = ApiWatch(f"http://127.0.0.1:{server.server_port}/api", temporary=True)
    _stop(server)
    try:
        assert _lost_within(watch, 2.0)
        log.warning("while lost")  # dropped: the flow's one line says what happened
    finally:
        watch.close()
    log.warning("after close")  # the process goes on: its logs are its own again
    assert [r.getMessage() for r in caplog.records] == ["after close"]

    monkeypatch.setattr(api_watch, "BUSY_S", 0.25)
    server = _serve()
    HUNG.set()
    watch = ApiWatch(f"http://127.0.0.1:{server.server_port}/api", temporary=False)
    try:
        time.sleep(0.5)  # the second hung probe under way, the busy clock running since the first
        watch.close()
        time.sleep(0.6)  # past BUSY_S: the probe that ends now must not report a lost server
        assert watch.lost is None
    finally:
        HUNG.clear()
        _stop(server)
