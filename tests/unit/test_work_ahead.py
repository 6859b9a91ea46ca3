"""The one store of work done ahead (pipeline/work_ahead.py): keyed by run, iteration and config hash,
taken once, dropped per run."""

from pathlib import Path
from types import SimpleNamespace

from thinking_seeds.pipeline.work_ahead import AheadStore


def _session(root: Path, config_hash: str = "h1"):
    return SimpleNamespace(run=SimpleNamespace(root=root), cfg=SimpleNamespace(config_hash=lambda: config_hash))


def test_work_is_taken_once_by_its_own_run_iteration_and_config(tmp_path):
    store: AheadStore[str] = AheadStore()
    a, b = _session(tmp_path / "a"), _session(tmp_path / "b")
    store.put(a, 3, "seeds of a/3")
    assert store.has(a, 3) and not store.has(b, 3) and not store.has(a, 4)
    assert store.peek(_session(tmp_path / "a", "h2"), 3) is None  # another config: not its work
    assert store.peek(a, 3) == "seeds of a/3" and store.has(a, 3)  # peek leaves it
    assert store.take(a, 3) == "seeds of a/3" and store.take(a, 3) is None


def test_drop_forgets_one_run_only(tmp_path):
    store: AheadStore[int] = AheadStore()
    a, b = _session(tmp_path / "a"), _session(tmp_path / "b")
    for k in range(3):
        store.put(a, k, k)
        store.put(b, k, 10 + k)
    store.drop(a.run)
    assert [store.has(a, k) for k in range(3)] == [False] * 3
    assert [store.take(b, k) for k in range(3)] == [10, 11, 12]
