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
    assert held_resources(run) is res and res.tracker is not None  # closed at exit (run_resources._close_at_exit)
    res.tracker = None
    close_resources(run)
    assert held_resources(run) is None


class _Process:
    def __init__(self, log: list, name: str, fail: bool = False):
        self.log, self.name, self.fail, self.alive = log, name, fail, True

    def stop(self, at_once: bool):
        self.log.append((self.name, at_once))
        self.alive = False
        if self.fail:
            raise OSError(f"{self.name} would not stop")


def _make(log, name, fail=False):
    return lambda: _Process(log, name, fail)


def _stop(p, at_once):
    p.stop(at_once)


def test_a_held_process_is_reused_until_its_key_changes_or_it_dies(tmp_path):
    from thinking_seeds.pipeline.run_resources import held_process, hold

    run, log = RunDir(tmp_path / "r"), []
    a = hold(run, "trainer", ("k",), _make(log, "a"), _stop, lambda p: p.alive)
    assert hold(run, "trainer", ("k",), _make(log, "b"), _stop, lambda p: p.alive) is a and log == []
    b = hold(run, "trainer", ("k2",), _make(log, "b"), _stop, lambda p: p.alive)  # launch settings changed
    assert b is not a and log == [("a", False)] and held_process(run, "trainer") is b
    assert held_process(run, "trainer", ("k",)) is None
    b.alive = False  # it died
    c = hold(run, "trainer", ("k2",), _make(log, "c"), _stop, lambda p: p.alive)
    assert c is not b
    close_resources(run)


def test_one_engine_per_process_but_a_verifier_per_run(tmp_path):
    from thinking_seeds.pipeline.run_resources import held_process, hold

    one, two, log = RunDir(tmp_path / "one"), RunDir(tmp_path / "two"), []
    e1 = hold(one, "engine", (), _make(log, "engine1"), _stop)
    v1 = hold(one, "verifier", (), _make(log, "verifier1"), _stop)
    e2 = hold(two, "engine", (), _make(log, "engine2"), _stop)  # run two's engine: run one's is stopped first
    hold(two, "verifier", (), _make(log, "verifier2"), _stop)
    assert log == [("engine1", False)] and held_process(one, "engine") is None and held_process(two, "engine") is e2
    assert held_process(one, "verifier") is v1 and e1.alive is False
    close_resources(one)
    close_resources(two)


def test_the_close_stops_every_process_the_trainer_first_and_at_once_after_ctrl_c(tmp_path):
    from thinking_seeds.pipeline.run_resources import hold

    run, log = RunDir(tmp_path / "r"), []
    hold(run, "engine", (), _make(log, "engine", fail=True), _stop)
    hold(run, "verifier", (), _make(log, "verifier"), _stop)
    hold(run, "trainer", (), _make(log, "trainer"), _stop)
    res = resources_for(run)
    with pytest.raises(OSError, match="engine would not stop"):  # the first error, after every stop was tried
        close_resources(run, at_once=True)
    assert log == [("trainer", True), ("engine", True), ("verifier", True)] and res.processes == {}
    close_resources(run)
    assert held_resources(run) is None


def test_a_sessions_engine_stopped_by_another_run_is_loaded_again(tmp_path, monkeypatch):
    from thinking_seeds.config import load_config
    from thinking_seeds.pipeline import session

    log: list = []
    built = iter(_Closable(log, f"engine{i}") for i in range(1, 4))
    monkeypatch.setattr(session, "build_engine", lambda *a, **k: next(built))
    one, two = (session.Session(RunDir(tmp_path / n), load_config("tiny")) for n in ("one", "two"))
    first = one.engine()
    assert one.engine() is first and log == []  # held: one load per run
    two.engine()  # one engine per process: run two's first stage stops run one's
    assert log == ["engine1"]
    again = one.engine()  # not the engine run two stopped, which one's Session no longer keeps
    assert again.name == "engine3" and log == ["engine1", "engine2"]
    close_resources(one.run)
    close_resources(two.run)
