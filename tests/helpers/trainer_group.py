"""The trainer group's commands of docs/scaling.md ("Several machines"), which e2e/test_trainer_machines.py
runs on one machine and unit/test_trainer_group.py finds, word for word, in the docs."""

from __future__ import annotations

RUN_ID = "big"
HEAD = "127.0.0.1"  # the driver machine's IP: the one word of the docs' commands a user changes (there: HEAD)
DOC_PORT = 29500  # the docs' port; the e2e test takes a free one (two tests on one host must not collide)


def driver_sets(head: str, port: int) -> list[str]:
    """The driver's `--set` keys: `ts train --preset tiny --run-id big --set ...` on machine 0."""
    return [
        "update.launcher=accelerate",
        "update.num_machines=2",
        f"update.main_process_ip={head}",
        f"update.main_process_port={port}",
    ]


def node_args(rank: int) -> list[str]:
    """What every other machine runs, after `ts`."""
    return ["trainer-node", "--run-id", RUN_ID, "--machine-rank", str(rank)]
