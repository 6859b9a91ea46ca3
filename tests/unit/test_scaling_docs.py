"""docs/scaling.md's multi-node commands are, word for word, those the tests run on one machine
(issue #14: "the documented multi-node commands are exactly those the tests run"): the Ray cluster's
(tests/helpers/ray_cluster.py, run by integration/test_ray.py) with HEAD for 127.0.0.1 and 6379 for a
free port; the trainer group's: unit/test_trainer_group.py."""

from __future__ import annotations

import json
import re

from tests.helpers import REPO
from tests.helpers.ray_cluster import (
    DEPLOYMENT_RUN_ID,
    DEPLOYMENT_SETS,
    DOC_PORT,
    driver_args,
    head_command,
    join_command,
)

DOC = REPO / "docs" / "scaling.md"


def _bash_block_after(heading: str) -> list[str]:
    """The command lines (comments dropped, continued lines joined) of the first bash block under `heading`."""
    text = DOC.read_text()
    assert heading in text, f"no {heading!r} in {DOC}"
    block = re.search(r"```bash\n(.*?)```", text[text.index(heading) :], re.S)
    assert block, f"no bash block under {heading!r}"
    joined = re.sub(r"\\\n\s*", "", block.group(1))
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _words(cmd: list[str]) -> str:
    return " ".join(["ray" if c.endswith("/ray") else c for c in cmd])


def test_the_docs_show_the_ray_commands_the_tests_run():
    head = f"HEAD:{DOC_PORT}"
    assert _bash_block_after("## Commands: a cluster of machines") == [
        _words(head_command(DOC_PORT)),
        _words(join_command(head)),
        f"export RAY_ADDRESS={head} TS_RUNS_DIR=/shared/runs",  # the test's env: the cluster's address, its runs dir
        "ts " + " ".join(driver_args()),
    ]


def test_the_docs_show_the_deployment_run_the_tests_run():
    assert _bash_block_after("**Scheduled deployments against a Ray cluster**") == [
        f"RAY_ADDRESS=HEAD:{DOC_PORT} TS_RUNS_DIR=/shared/runs prefect worker start --pool ts-process",
        f"prefect deployment run train/train --param run_id={DEPLOYMENT_RUN_ID} "
        f"--param 'overrides={json.dumps(DEPLOYMENT_SETS)}' --watch",
    ]
