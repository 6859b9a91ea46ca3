"""Ray, as the rollout and verification workers use it (cluster=ray; the optional `ray` extra).

- `connect(address)`: join a running cluster (cluster.address, else RAY_ADDRESS). A user's mistake
  (Ray not installed, no address, nothing listening there) is one ClusterError line, before any work.
- `fan_out(...)`: run items (shards of a stage's requests, chunks of its responses) on a list of actors,
  each actor taking the next item when it is free, and gather the results in the items' order. An item
  whose actor died (killed, OOM, its machine lost) is retried on the next free actor (Ray restarts the
  dead one: actors are created with `max_restarts`), at most `retries` times: nothing is lost, and
  nothing is counted twice because results are keyed by item.
- `RayVerifier`: `Verifier.score_batch` fanned out over `reward.workers` actors, each holding a
  one-process Verifier. Verdicts depend only on (response, prompt): any chunking gives the same ones.

Nothing here is imported on cluster=local: `import ray` happens inside `connect` only.
"""

from __future__ import annotations

import os
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from thinking_seeds.data.ray_died import session_logs_dir, worker_died

if TYPE_CHECKING:
    from thinking_seeds.data.sources import Prompt
    from thinking_seeds.data.verdicts import Verdict

NAMESPACE = "thinking-seeds"


class ClusterError(ValueError):
    """cluster=ray cannot be used as configured, with what to do about it (one line, exit 2 in `ts`)."""


def ray_module():
    try:
        import ray
    except ImportError:
        raise ClusterError(
            "cluster=ray needs Ray, which is not installed here: pip install 'thinking-seeds[ray]' "
            "(or `make install`), or set cluster=local"
        ) from None
    return ray


def cluster_address(address: str | None) -> str:
    addr = address or os.environ.get("RAY_ADDRESS")
    if not addr:
        raise ClusterError(
            "cluster=ray needs the cluster's address: set cluster.address=HOST:PORT or RAY_ADDRESS "
            "(start a cluster with `ray start --head --port 6379`)"
        )
    return addr


def _check_reachable(addr: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not after Ray's own minute of retries, when nothing listens at `addr`."""
    if addr in ("auto", "local"):
        return
    hostport = addr.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"cluster.address={addr!r} is not HOST:PORT (e.g. 10.0.0.1:6379, or ray://HOST:10001)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ClusterError(
            f"no Ray cluster answers at {addr} ({e.strerror or e}): start one there with "
            f"`ray start --head --port {port}`, or fix cluster.address / RAY_ADDRESS"
        ) from None


def connect(address: str | None):
    """The `ray` module, connected to the cluster at `address` (or RAY_ADDRESS); once per process."""
    ray = ray_module()
    if ray.is_initialized():
        return ray
    addr = cluster_address(address)
    _check_reachable(addr)
    try:
        ray.init(address=addr, namespace=NAMESPACE, logging_level="WARNING", log_to_driver=True)
    except (ConnectionError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ClusterError(f"cannot join the Ray cluster at {addr}: {first}") from None
    return ray


def actor_options(ray, *, num_cpus: float = 1.0, num_gpus: float = 0.0, restarts: int = 3) -> dict[str, Any]:
    """Options of every worker actor: restarted by Ray after a crash (its constructor runs again), never
    retried by Ray mid-call (fan_out retries the item, so it knows what was lost), spread over the nodes."""
    return {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "max_restarts": restarts,
        "max_task_retries": 0,
        "scheduling_strategy": "SPREAD",
    }


def wait_started(ray, actors: Sequence[Any], what: str, timeout_s: float) -> list[int]:
    """The actors' pids once every one has started; a ClusterError when they cannot within `timeout_s`
    (most often: the cluster has too few free CPUs or GPUs for them, and Ray would wait forever)."""
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        return ray.get([a.pid.remote() for a in actors], timeout=timeout_s)
    except GetTimeoutError:
        free = ray.available_resources()
        raise ClusterError(
            f"{len(actors)} Ray {what} did not start within {timeout_s:.0f} s; the cluster has "
            f"{free.get('CPU', 0):g} CPUs and {free.get('GPU', 0):g} GPUs free: lower the workers, "
            "cluster.worker_cpus or rollout.worker_gpus, or add nodes"
        ) from None
    except RayActorError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeError(f"a Ray {what[:-1]} failed to start: {first}") from e


def fan_out(
    ray,
    actors: Sequence[Any],
    submit: Callable[[Any, Any], Any],
    items: Sequence[Any],
    retries: int = 3,
    on_result: Callable[[int, Any], None] | None = None,
) -> tuple[list[Any], int]:
    """`submit(actor, item)` -> an ObjectRef, for every item, on the first free actor; results in items'
    order and the number of retried items. An item whose actor died is retried (up to `retries` times)."""
    from ray.exceptions import RayActorError, RayTaskError

    if not actors:
        raise ValueError("fan_out needs at least one actor")
    queue: deque[tuple[int, int]] = deque((i, 0) for i in range(len(items)))  # (item index, attempt)
    free: deque[int] = deque(range(len(actors)))
    pending: dict[Any, tuple[int, int, int]] = {}  # ref -> (item index, attempt, actor index)
    results: dict[int, Any] = {}
    retried = 0
    while queue or pending:
        while queue and free:
            i, attempt = queue.popleft()
            a = free.popleft()
            pending[submit(actors[a], items[i])] = (i, attempt, a)
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            i, attempt, a = pending.pop(ref)
            free.append(a)
            try:
                out = ray.get(ref)
            except RayTaskError as e:  # the worker's code raised: a user's mistake stays one line (exit 2)
                if isinstance(e.cause, ValueError):
                    raise e.cause from None
                raise
            except RayActorError as e:
                if getattr(e, "actor_init_failed", False):
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    raise RuntimeError(f"a Ray worker failed to start for item {i}: {first}") from e
                if attempt >= retries:  # one line: which worker, how, its log, a rerun resumes
                    raise worker_died(str(e), i, attempt + 1, session_logs_dir(ray)) from None
                retried += 1
                queue.appendleft((i, attempt + 1))  # the actor is restarting; the next free one takes it
                continue
            results[i] = out
            if on_result is not None:
                on_result(i, out)
    return [results[i] for i in range(len(items))], retried


class VerifierWorker:
    """A Ray actor (cluster=ray) holding one Verifier with one worker process."""

    def __init__(self, backend: str, partial_credit: bool, fn: str | None, timeout_s: float) -> None:
        from thinking_seeds.data.rewards import Verifier

        self.verifier = Verifier(backend=backend, partial_credit=partial_credit, fn=fn, timeout_s=timeout_s)

    def pid(self) -> int:
        return os.getpid()

    def score(self, responses: list[str], prompts: list[Prompt]) -> list[Verdict]:
        return self.verifier.score_batch(responses, prompts)


class RayVerifier:
    """`score_batch` on `workers` Ray actors, in chunks (~4 per worker), gathered in order."""

    def __init__(
        self,
        ray,
        backend: str,
        partial_credit: bool,
        fn: str | None,
        timeout_s: float,
        workers: int,
        retries: int = 3,
        cpus: float = 1.0,
        start_timeout_s: float = 600.0,
    ) -> None:
        self.ray = ray
        self.retries = retries
        cls = ray.remote(VerifierWorker).options(**actor_options(ray, num_cpus=cpus, restarts=max(1, retries)))
        self.actors = [cls.remote(backend, partial_credit, fn, timeout_s) for _ in range(workers)]
        self.retried = 0
        try:
            wait_started(ray, self.actors, "verifier workers", start_timeout_s)
        except BaseException:
            self.close()
            raise

    def score_batch(self, responses: Sequence[str], prompts: Sequence[Prompt]) -> list[Verdict]:
        if len(responses) != len(prompts):
            raise ValueError(f"score_batch: {len(responses)} responses but {len(prompts)} prompts")
        if not responses:
            return []
        size = max(1, -(-len(responses) // (4 * len(self.actors))))
        chunks = [(list(responses[s : s + size]), list(prompts[s : s + size])) for s in range(0, len(responses), size)]
        outs, retried = fan_out(self.ray, self.actors, lambda a, c: a.score.remote(c[0], c[1]), chunks, self.retries)
        self.retried += retried
        return [v for out in outs for v in out]

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
