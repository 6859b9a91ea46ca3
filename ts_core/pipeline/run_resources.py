"""What one run holds in this process, in one object per run: created when the run opens (or on first
use by a stage called outside a run's life, as tests and `ts eval` do) and closed, in one teardown, when
it closes (pipeline/run_lifecycle.py).

    resources_for(run)      the run's RunResources, keyed once here by the run directory's resolved path
    close_resources(run)    its teardown: work held ahead, the in-process trainer (its checkpoint flushed)
                            and the run's in-memory policies, the flow's shared Session, the trackers

Its fields were module registries of their own before (the work-ahead stores of seeds_ahead.py and
groups_ahead.py, policy_chain.py's residents, session.py's sessions and trackers).

Still per process, not per run, and closed by run_lifecycle beside this teardown: the persistent
trainer (pipeline/trainer_client.py, one at a time per process; Ctrl-C terminates it at once). Outliving
a run on purpose: the engine and the Ray pools (session.py; the next run or evaluation in the process
reuses or replaces them), the verifier pools (data/rewards.py) and the checked checkpoints
(store/checkpoints.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thinking_seeds.pipeline.work_ahead import AheadStore
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.transports import live_weights


@dataclass
class RunResources:
    """One run's processes and caches in this process."""

    root: str  # the run directory, resolved: the one key
    seeds_ahead: AheadStore = field(default_factory=AheadStore)  # pipeline/seeds_ahead.py
    groups_ahead: AheadStore = field(default_factory=AheadStore)  # pipeline/groups_ahead.py
    resident: Any = None  # train.resident.Resident (update.launcher=in_process; pipeline/policy_chain.py)
    session: tuple[tuple[int, int], Any] | None = None  # (config.yaml's signature, the flow's shared Session)
    tracker: Any = None  # store.tracking.Tracker (the run's `logger`; Session.tracker)

    def forget_policies(self) -> None:
        """The in-process trainer (its background checkpoint flushed first) and the run's policies in memory."""
        res, self.resident = self.resident, None
        if res is not None:
            res.flush()
        live_weights.clear(self.root)

    def drop_session(self) -> None:
        held, self.session = self.session, None
        if held is not None:
            held[1].close()

    def close_tracker(self) -> None:
        t, self.tracker = self.tracker, None
        if t is not None:
            t.close()

    def close(self) -> None:
        """The teardown, in the order the run's close always took: work held ahead, in-memory policies
        (after the resident's checkpoint), the shared Session, the trackers. An error stops it there (a
        failed checkpoint write): what is left stays held, and what is closed at exit (the trackers) is."""
        run = RunDir(Path(self.root))
        self.seeds_ahead.drop(run)
        self.groups_ahead.drop(run)
        self.forget_policies()
        self.drop_session()
        self.close_tracker()


_RUNS: dict[str, RunResources] = {}
_LOCK = threading.RLock()


def _key(run: RunDir) -> str:
    return str(run.root.resolve())


def resources_for(run: RunDir) -> RunResources:
    """The run's RunResources in this process, made on first use."""
    key = _key(run)
    with _LOCK:
        res = _RUNS.get(key)
        if res is None:
            res = _RUNS[key] = RunResources(key)
        return res


def held_resources(run: RunDir) -> RunResources | None:
    """The run's RunResources if this process holds any (nothing is made)."""
    with _LOCK:
        return _RUNS.get(_key(run))


def all_resources() -> list[RunResources]:
    """Every run's RunResources in this process."""
    with _LOCK:
        return list(_RUNS.values())


def shared_session(run: RunDir, sig: tuple[int, int], make: Callable[[], Any]) -> Any:
    """The run's shared Session (pipeline/session.py `session_for`), made by `make` when there is none or
    config.yaml's signature `sig` changed."""
    with _LOCK:
        res = resources_for(run)
        if res.session is None or res.session[0] != sig:
            res.session = (sig, make())
        return res.session[1]


def close_resources(run: RunDir) -> None:
    """Close what the run holds in this process, then forget it (the run's close). If the teardown
    raises, the rest stays held here (the trackers are then closed at exit)."""
    res = held_resources(run)
    if res is None:
        return
    res.close()
    with _LOCK:
        if _RUNS.get(res.root) is res:
            del _RUNS[res.root]
