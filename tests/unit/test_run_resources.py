"""One RunResources per run and process (pipeline/run_resources.py): keyed by the resolved run directory,
closed in one teardown (work ahead, resident, session, tracker), and forgotten only once closed."""

from types import SimpleNamespace

import pytest

from thinking_seeds.pipeline.run_resources import close_resources, held_resources, resources_for
from thinking_seeds.store.run_dir import RunDir


class _Closable:
    def __init__(self, log: list, name: str, fail: bool = False):
        self.log, self.name, self.fail = log, name, fail

    def close(self):
        self.log.append(self.name)

    def flush(self):
        self.log.append(self.name)
        if self.fail:
            raise OSError("disk full")


def test_one_object_per_run_closed_in_one_teardown(tmp_path):
    run = RunDir(tmp_path / "r")
    run.root.mkdir()
    res = resources_for(run)
    assert resources_for(RunDir(tmp_path / "r" / ".." / "r")) is res  # one key: the resolved path
    log: list = []
    s = SimpleNamespace(run=run, cfg=SimpleNamespace(config_hash=lambda: "h"))
    res.seeds_ahead.put(s, 1, "seeds")
    res.resident = _Closable(log, "resident")
    res.session = ((0, 0), _Closable(log, "session"))
    res.tracker = _Closable(log, "tracker")
    close_resources(run)
    assert log == ["resident", "session", "tracker"]
    assert held_resources(run) is None and not res.seeds_ahead.has(s, 1)


def test_a_failed_teardown_keeps_what_is_left(tmp_path):
    run = RunDir(tmp_path / "r")
    log: list = []
    res = resources_for(run)
    res.resident = _Closable(log, "resident", fail=True)
    res.tracker = _Closable(log, "tracker")
    with pytest.raises(OSError):
        close_resources(run)
    assert held_resources(run) is res and res.tracker is not None  # closed at exit (session.close_trackers)
    res.tracker = None
    close_resources(run)
    assert held_resources(run) is None
