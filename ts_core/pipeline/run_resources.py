"""What one run holds in this process, in one object per run: created when the run opens (or on first
use by a stage called outside a run's life, as tests and `ts eval` do) and closed, in one teardown, when
it closes (pipeline/run_lifecycle.py).

    resources_for(run)               the run's RunResources, keyed once here by the run directory's path
    hold(run, kind, key, make, stop) a process (or pool of them) the run holds: its engine, persistent
                                     trainer, Ray pools, verifier pools; made on first use, remade when
                                     its key (what fixes it) changed
    close_resources(run, at_once)    the run's teardown: work held ahead, the in-process trainer (its
                                     checkpoint flushed) and the run's policies in memory, the flow's
                                     shared Session, the trackers, then every process it holds; a
                                     normal close (not at once) also waits for the block compacting
                                     in the background (store/compaction.py)

An engine, a persistent trainer and each kind of Ray pool are held by one run at a time in a process
(`ONE_PER_PROCESS`): a run that makes one stops the other runs' first (a vLLM engine holds its KV cache
until closed, a trainer its model and optimizer). Verifier pools are CPU workers: every run keeps its own.

Still per process, on purpose, not per run: the child guard (store/child_guard.py: one guard process
watches this OS process, whichever runs it serves) and the checked checkpoints (store/checkpoints.py: a
memo keyed by the files' signatures, so a changed file is checked again; nothing in it needs closing).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from thinking_seeds.pipeline.work_ahead import AheadStore
from thinking_seeds.store.compaction import wait_for_compaction
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.transports import live_weights

# kinds a process holds for one run at a time (hold): their memory is the machine's (GPU, or the Ray CPUs)
ONE_PER_PROCESS = frozenset({"engine", "trainer", "ray_rollout", "ray_verify"})
VERIFIER_KIND = "verifier"  # + the settings: a local verifier pool, one per settings (session.run_verifier)


@dataclass
class Held:
    """A process (or a pool of them) a run holds: what fixes it, the object, and how it is stopped."""

    key: tuple
    obj: Any
    stop: Callable[[bool], None]  # stop(at_once): at_once on Ctrl-C and at exit where waiting is pointless


@dataclass
class RunResources:
    """One run's processes and caches in this process."""

    root: str  # the run directory, resolved: the one key
    seeds_ahead: AheadStore = field(default_factory=AheadStore)  # pipeline/seeds_ahead.py
    groups_ahead: AheadStore = field(default_factory=AheadStore)  # pipeline/groups_ahead.py
    resident: Any = None  # train.resident.Resident (update.launcher=in_process; pipeline/policy_chain.py)
    session: tuple[tuple[int, int], Any] | None = None  # (config.yaml's signature, the flow's shared Session)
    tracker: Any = None  # store.tracking.Tracker (the run's `logger`; Session.tracker)
    # "engine" (session.py), "trainer" (trainer_client.py), "ray_rollout" / "ray_verify" (session.py),
    # "verifier(<settings>)" (session.py run_verifier): each made by `hold`
    processes: dict[str, Held] = field(default_factory=dict)

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

    def stop(self, kind: str, at_once: bool = False) -> None:
        """Stop the run's `kind`, if it holds one."""
        held = self.processes.pop(kind, None)
        if held is not None:
            held.stop(at_once)

    def stop_processes(self, at_once: bool = False, keep: frozenset[str] = frozenset()) -> None:
        """Stop every process the run holds (but `keep`'s kinds), the trainer first (it writes θ_T's
        checkpoint while the rest stops). Each is stopped even if one before it failed; the first error
        is raised after."""
        kinds = [kind for kind in sorted(self.processes, key=lambda k: k != "trainer") if kind not in keep]
        _every(partial(self.stop, kind, at_once) for kind in kinds)

    def close(self, at_once: bool = False) -> None:
        """The teardown, in the order the run's close always took: work held ahead, in-memory policies
        (after the resident's checkpoint), the shared Session, the trackers, the processes. An error stops
        it there (a failed checkpoint write): what is left stays held, and is stopped at exit."""
        run = RunDir(Path(self.root))
        self.seeds_ahead.drop(run)
        self.groups_ahead.drop(run)
        self.forget_policies()
        self.drop_session()
        self.close_tracker()
        self.stop_processes(at_once)
        if not at_once:  # the block compacting in the background ends before the run lets go (Ctrl-C: exit first)
            wait_for_compaction(Path(self.root))


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


def hold(
    run: RunDir,
    kind: str,
    key: tuple,
    make: Callable[[], Any],
    stop: Callable[[Any, bool], None],
    usable: Callable[[Any], bool] = lambda obj: True,
) -> Any:
    """The run's `kind`: the one it holds if `key` is the same and it is `usable` (a trainer: alive),
    else one made by `make` (the old one stopped first; of a kind in ONE_PER_PROCESS, other runs' too).
    `stop(obj, at_once)` stops it at the run's close, when replaced, and at exit."""
    with _LOCK:
        res = resources_for(run)
        held = res.processes.get(kind)
        if held is not None and held.key == key and usable(held.obj):
            return held.obj
        res.stop(kind)
        if kind in ONE_PER_PROCESS:
            for other in all_resources():
                other.stop(kind)
        obj = make()
        res.processes[kind] = Held(key, obj, lambda at_once: stop(obj, at_once))
        at_exit_last()
        return obj


def held_process(run: RunDir, kind: str, key: tuple | None = None) -> Any:
    """The run's `kind` if it holds one (with this key, if given); nothing is made."""
    with _LOCK:
        res = _RUNS.get(_key(run))
        held = res.processes.get(kind) if res is not None else None
        return held.obj if held is not None and (key is None or held.key == key) else None


def drop_process(run: RunDir, kind: str, obj: Any) -> bool:
    """Forget the run's `kind` if it is `obj` (a failed trainer: the next use makes a fresh one); whether
    it was held. The caller stops it."""
    with _LOCK:
        res = _RUNS.get(_key(run))
        if res is not None and kind in res.processes and res.processes[kind].obj is obj:
            del res.processes[kind]
            return True
        return False


def stop_everywhere(kind: str, at_once: bool = False) -> None:
    """Stop every run's `kind` in this process (tests and benchmarks that want fresh workers)."""
    for res in all_resources():
        res.stop(kind, at_once)


def shared_session(run: RunDir, sig: tuple[int, int], make: Callable[[], Any]) -> Any:
    """The run's shared Session (pipeline/session.py `session_for`), made by `make` when there is none or
    config.yaml's signature `sig` changed."""
    with _LOCK:
        res = resources_for(run)
        if res.session is None or res.session[0] != sig:
            res.session = (sig, make())
        return res.session[1]


def close_resources(run: RunDir, at_once: bool = False) -> None:
    """Close what the run holds in this process, then forget it (the run's close; at_once: a Ctrl-C, its
    trainer is terminated now). If the teardown raises, the rest stays held here (stopped at exit)."""
    res = held_resources(run)
    if res is None:
        return
    res.close(at_once)
    with _LOCK:
        if _RUNS.get(res.root) is res:
            del _RUNS[res.root]


def close_trackers() -> None:
    """Flush and close every run's tracker in this process (after a Ctrl-C: flows/cli/errors.py, and at
    exit); a run's own close closes its tracker."""
    for res in all_resources():
        res.close_tracker()


def stop_at_interrupt() -> None:
    """After a Ctrl-C, on the way out (flows/cli/errors.py exit_interrupted): the trackers flush what they
    hold, the verifier pools are killed (a chunk being scored would hold the exit up to timeout_s per
    item). The rest is the child guard's (store/child_guard.py)."""
    close_trackers()
    for res in all_resources():
        for kind in [k for k in res.processes if k.startswith(VERIFIER_KIND)]:
            res.stop(kind, at_once=True)


def _close_at_exit() -> None:
    """At exit: every run's trackers and processes, the engines aside (they die with the process, and
    closing an in-process vLLM engine at exit tears down state other exit handlers still use)."""
    close_trackers()
    _every(partial(res.stop_processes, keep=frozenset({"engine"})) for res in all_resources())


def _every(calls: Iterable[Callable[[], None]]) -> None:
    """Make every call even if one before it failed (a failed stop must not leave the others running);
    the first error is raised after."""
    error: BaseException | None = None
    for call in calls:
        try:
            call()
        except Exception as e:
            error = error or e
    if error is not None:
        raise error


def at_exit_last() -> None:
    """(Re-)register the exit teardown so that it runs before the exit handlers registered so far: those
    of what the run's processes use (Ray's shutdown, a tracker's own flush) run after it, as they must."""
    atexit.unregister(_close_at_exit)
    atexit.register(_close_at_exit)
