"""A user's mistake in a deployment is one line (issue 50, item 3), with a real Prefect server, prefect.yaml's
deployments and a process worker (tests/e2e/test_deployment.py's `_deployed`): for `overrides=["iterations=abc"]`,
`preset=nosuch` and `run_id=nope` (nightly, corpus-report), the flow run ends Failed with the line as its
state message, its log (what the UI shows) says the line once and has no traceback, and the worker's
terminal says it once without a traceback (it printed the traceback three times: 82 lines for one bad value).
The fast, in-process half: tests/integration/test_flow_user_errors.py."""

from __future__ import annotations

import json
import re
import time
import urllib.request

from tests.e2e.test_deployment import _deployed

CASES = {  # deployment, its parameters, what the one line says
    "iterations=abc": (
        "train/train",
        {"run_id": "x", "overrides": ["iterations=abc"]},
        "iterations: must be a whole number, e.g. 3 (got 'abc', which is text)",
    ),
    "preset=nosuch": ("train/train", {"preset": "nosuch", "run_id": "x"}, "unknown preset 'nosuch'"),
    "nightly run_id=nope": ("evaluate/nightly", {"run_id": "nope"}, "nope is not a run directory (no config.yaml)"),
    "corpus-report run_id=nope": ("report/corpus-report", {"run_id": "nope"}, "no run 'nope' under"),
}
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _api(api: str, method: str, path: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{api}{path}", data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_a_user_error_in_a_deployment_is_one_line_in_state_log_and_worker_terminal(tmp_path):
    with _deployed(tmp_path) as (run, logs, *_):
        api = _api_url(run)
        ids = {}
        for case, (deployment, params, _) in CASES.items():
            args = [
                a for k, v in params.items() for a in ("--param", f"{k}={json.dumps(v) if isinstance(v, list) else v}")
            ]
            out = run("deployment", "run", deployment, *args)
            ids[case] = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)
        deadline = time.monotonic() + 600
        states = {}
        while time.monotonic() < deadline:
            states = {case: _api(api, "GET", f"/flow_runs/{i}")["state"] for case, i in ids.items()}
            if all(s and s["type"] in FINAL for s in states.values()):
                break
            time.sleep(2)
        time.sleep(5)  # the worker's own last lines (the process's exit code) reach its terminal and the API
        worker = (logs / "worker.log").read_text()
        for case, (_, _, said) in CASES.items():
            st = states[case]
            assert st["type"] == "FAILED" and said in st["message"] and "\n" not in st["message"], (
                case,
                st,
                worker[-3000:],
            )
            body = {"logs": {"flow_run_id": {"any_": [ids[case]]}}, "sort": "TIMESTAMP_ASC", "limit": 200, "offset": 0}
            log = [line for r in _api(api, "POST", "/logs/filter", body) for line in r["message"].splitlines()]
            assert [line for line in log if said in line] == [st["message"]], (case, log)
            assert not [line for line in log if "Traceback" in line or line.startswith("  File ")], (case, log)
            assert len([line for line in worker.splitlines() if said in line]) == 1, (case, worker[-5000:])
        assert "Traceback" not in worker and "exited with unexpected exception" not in worker, worker[-5000:]


def _api_url(run) -> str:
    """The server's API address, as the harness's `prefect` commands see it."""
    return run("config", "view", "--show-sources").split("PREFECT_API_URL='")[1].split("'")[0]
