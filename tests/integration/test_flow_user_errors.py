"""A user's mistake in a deployment's flow run is one line (issue 50, item 3): the flow run's state
message and its log (what the UI shows) say it once, with no traceback, and so does the engine process's
terminal (what a process worker prints). Each flow runs as Prefect's engine runs a deployment's flow run
(prefect/engine.py `__main__`: a flow run created first, `run_flow` with the run's error logger, inside
`handle_engine_signals`, which ends the process); tests/e2e/test_deployment_errors.py does it with a real
worker. TS_DEBUG=1 keeps Prefect's tracebacks."""

from __future__ import annotations

import logging
import time

import pytest
from prefect.client.orchestration import get_client

from thinking_seeds.flows.evaluate import evaluate_flow
from thinking_seeds.flows.report import report_flow
from thinking_seeds.flows.train import train_flow

CASES = {  # the issue's: a bad value in overrides, a run that does not exist, a preset that does not exist
    "iterations=abc": (
        train_flow,
        {"preset": "tiny", "run_id": "x", "overrides": ["iterations=abc"]},
        "iterations: must be a whole number, e.g. 3 (got 'abc', which is text)",
    ),
    "preset=nosuch": (train_flow, {"preset": "nosuch", "run_id": "x"}, "unknown preset 'nosuch'"),
    "nightly run_id=nope": (evaluate_flow, {"run_id": "nope"}, "is not a run directory (no config.yaml)"),
    "corpus-report run_id=nope": (report_flow, {"run_id": "nope"}, "no run 'nope' under"),
}


class _Terminal(logging.Handler):
    """What Prefect's console handler would print: every record that reaches the `prefect` logger."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += self.format(record).splitlines()


def _as_a_deployment_runs_it(flow, parameters: dict) -> tuple[str, int, list[str]]:
    """(flow run id, the engine process's exit code, its terminal's lines)."""
    from prefect.engine import handle_engine_signals
    from prefect.flow_engine import run_flow
    from prefect.logging.loggers import flow_run_logger

    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(flow, parameters=parameters)
    terminal = _Terminal()
    logging.getLogger("prefect").addHandler(terminal)
    try:
        with pytest.raises(SystemExit) as ended, handle_engine_signals(flow_run.id):
            run_flow(flow, flow_run=flow_run, error_logger=flow_run_logger(flow_run=flow_run))
    finally:
        logging.getLogger("prefect").removeHandler(terminal)
    return str(flow_run.id), ended.value.code, terminal.lines


def _state_and_log(flow_run_id: str) -> tuple[dict, list[str]]:
    """The flow run's final state and its log's lines, from the API."""
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    body = {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "sort": "TIMESTAMP_ASC", "limit": 200, "offset": 0}
    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 30
        while True:  # the final state's record is the last one sent
            logs = client.request("POST", "/logs/filter", json=body).json()
            state = client.request("GET", f"/flow_runs/{flow_run_id}").json()["state"]
            if any(r["level"] >= logging.ERROR for r in logs) or time.monotonic() > deadline:
                return state, [line for r in logs for line in r["message"].splitlines()]
            time.sleep(0.3)


# two here (~2 s each); the four of the issue with a real worker in tests/e2e/test_deployment_errors.py
@pytest.mark.parametrize("case", ["iterations=abc", "corpus-report run_id=nope"])
def test_a_user_error_in_a_deployed_flow_is_one_line_in_state_log_and_terminal(case, runs_dir, monkeypatch):
    monkeypatch.delenv("TS_DEBUG", raising=False)
    flow, parameters, said = CASES[case]
    flow_run_id, code, terminal = _as_a_deployment_runs_it(flow, parameters)
    state, log = _state_and_log(flow_run_id)

    assert code in (0, 1)  # the engine's process ends: 1 under Prefect 3.7; 0 under 3.9 (the run's outcome is handled)
    assert state["type"] == "FAILED" and said in state["message"] and "\n" not in state["message"], state
    assert [line for line in log if said in line] == [state["message"]], log  # said once, as the state says it
    assert not [line for line in log if "Traceback" in line or "File " in line], log
    assert not [line for line in log + terminal if "exited with unexpected exception" in line], (log, terminal)
    assert [line for line in terminal if said in line] == [f"prefect.flow_runs ERROR {state['message']}"], terminal
    assert not [line for line in terminal if "Traceback" in line], terminal


def test_ts_debug_keeps_prefects_tracebacks(runs_dir, monkeypatch):
    monkeypatch.setenv("TS_DEBUG", "1")
    flow, parameters, said = CASES["preset=nosuch"]
    flow_run_id, code, terminal = _as_a_deployment_runs_it(flow, parameters)
    _, log = _state_and_log(flow_run_id)
    assert code in (0, 1) and any("Traceback" in line for line in log) and any("Traceback" in line for line in terminal)
