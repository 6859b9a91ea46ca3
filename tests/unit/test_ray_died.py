"""A Ray worker dead past its retries, in one line (data/ray_died.py), from Ray's own message: the real
one comes from a killed worker in tests/integration/test_ray.py (slow); here its parsing and fallbacks."""

from __future__ import annotations

from thinking_seeds.data.ray_died import RayWorkerDied, worker_died
from thinking_seeds.flows.cli.errors import is_user_error, user_error_text

# ActorDiedError's message for a worker killed -9 (ray 2.x: the fields, then its exit detail and guesses)
KILLED = """The actor died unexpectedly before finishing this task.
\tclass_name: RolloutWorker
\tactor_id: 5b0d1c2e3f4a
\tpid: 4242
\tnamespace: thinking-seeds
\tip: 10.0.0.7
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: \
Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root \
causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage."""


def test_a_killed_worker_with_its_log_here(tmp_path):
    (tmp_path / "worker-aa-01000000-4242.err").write_text("loading θ_3\\nsampling shard 7\n" + "x" * 10 + "\n")
    e = worker_died(KILLED, 7, 4, tmp_path)
    line, details = user_error_text(e)
    assert isinstance(e, RayWorkerDied) and is_user_error(e)
    assert line.startswith("Ray worker RolloutWorker (pid 4242, on 10.0.0.7) died on shard 7 (tried 4 times): ")
    assert "its process exited unexpectedly: Worker unexpectedly exits with a connection error code 2" in line
    assert "OOM killer" in line and "`ts plan`" in line
    assert f"full log: {tmp_path / 'worker-aa-01000000-4242.err'};" in line
    assert line.endswith("rerun the same command to resume the run from its last finished stage")
    assert "sampling shard 7" in details and "potential root causes" not in line


def test_a_log_on_another_node_is_named_not_read(tmp_path):
    line, details = user_error_text(worker_died(KILLED, 0, 1, tmp_path))  # no such file here
    assert "(tried 1 time)" in line
    assert "full log: worker-*-4242.err in the Ray session's logs folder on 10.0.0.7" in line
    assert not details


def test_a_message_without_fields_still_gives_a_line():
    line, _ = user_error_text(worker_died("The actor experienced an error before finishing this task.", 2, 1, None))
    assert line.startswith("Ray worker died on shard 2 (tried 1 time): The actor experienced an error")
    assert "OOM killer" in line and "\n" not in line and "full log: the worker's .err file in the Ray session" in line
