"""Work done ahead, held in this process until its stage takes it: the one keyed store behind seeds
drafted ahead (pipeline/seeds_ahead.py) and groups sampled ahead (pipeline/groups_ahead.py), one of
each per run (fields of its RunResources: pipeline/run_resources.py).

Keyed by (run directory, iteration, config hash), so two runs in one process, or one run under two
configs, never take each other's work. Thread-safe: the work is put by a thread (or a Prefect task)
beside the update and taken by the stage in the main thread. Nothing here is written to disk: a run
killed meanwhile loses only this memory, and its manifests stay the record of what is done.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Generic, TypeVar

from thinking_seeds.store.run_dir import RunDir

if TYPE_CHECKING:  # the session module holds the run's resources, which hold these stores
    from thinking_seeds.pipeline.session import Session

T = TypeVar("T")


class AheadStore(Generic[T]):
    """Work of iteration k of a run, put once and taken once."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, int, str], T] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(s: Session, k: int) -> tuple[str, int, str]:
        return (str(s.run.root.resolve()), k, s.cfg.config_hash())

    def put(self, s: Session, k: int, item: T) -> None:
        with self._lock:
            self._items[self._key(s, k)] = item

    def has(self, s: Session, k: int) -> bool:
        with self._lock:
            return self._key(s, k) in self._items

    def peek(self, s: Session, k: int) -> T | None:
        """The item, left in place."""
        with self._lock:
            return self._items.get(self._key(s, k))

    def take(self, s: Session, k: int) -> T | None:
        """The item, removed (None if there is none)."""
        with self._lock:
            return self._items.pop(self._key(s, k), None)

    def drop(self, run: RunDir) -> None:
        """Forget everything of this run (it ended, or failed)."""
        root = str(run.root.resolve())
        with self._lock:
            for key in [key for key in self._items if key[0] == root]:
                del self._items[key]
