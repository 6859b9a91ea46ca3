"""The verifier: reward each response against its prompt's ground truth, with a status per item.

    with Verifier(backend="math_verify", timeout_s=5.0, workers=1) as v:
        verdicts = v.score_batch(responses, prompts)      # list[Verdict], same order
        counts = count_statuses(verdicts)                  # {'ok': .., 'wrong': .., ...}

Status (docs/algorithm.md §2 step 4): ok (correct) | wrong | no_answer (no `\\boxed{...}`) | timeout | error.
A timeout or a checker failure is never a silent 0 reward with status 'wrong': it is counted.

Why worker processes: math-verify bounds its parse/verify time with `signal.alarm`, which only
works in a process's main thread (it raises ValueError elsewhere), and a pathological answer can
hang sympy. So scoring runs in a persistent spawn-context process pool, created lazily and reused
across calls. Two layers of time limits:

- inner, per item: each worker arms its own SIGALRM timer (`timeout_s`) around one item, in its
  main thread, so one slow item costs at most `timeout_s` and is marked 'timeout'. math-verify's
  own alarms are switched off so the two do not cancel each other.
- outer, per batch: if no chunk finishes within `chunk_size * timeout_s + stall_slack_s`, a worker
  is stuck where signals cannot reach (C code holding the GIL). The pool is killed and recreated;
  the items of the stuck chunks are retried one by one and an item that stalls again is marked
  'timeout'. A crashed worker is handled the same way ('error').

Items go to the pool in chunks (default 16) so 128 responses cost 8 round trips, not 128.
Answers are extracted in the caller (cheap), so responses without one never reach the pool.

Note: spawn workers import the caller's `__main__` module; scripts that use a Verifier must guard
their entry point with `if __name__ == "__main__":`.

This module is the caller side (the pool, the stall window, retries) and the verifier's public
face. The worker side (per-item alarms, the three scoring backends) is data/verifier_worker.py;
Verdict, the statuses and last_boxed are data/verdicts.py.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import signal
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING

from thinking_seeds.data.verdicts import BACKENDS, STATUSES, Backend, Status, Verdict, count_statuses, last_boxed
from thinking_seeds.data.verifier_worker import Item, Result, ping, score_chunk, worker_init
from thinking_seeds.plugins import load_reward_fn

if TYPE_CHECKING:
    from thinking_seeds.data.sources import Prompt

__all__ = [
    "BACKENDS",
    "STATUSES",
    "Status",
    "Verdict",
    "Verifier",
    "check_reward_fn",
    "count_statuses",
    "last_boxed",
    "load_reward_fn",
]


def check_reward_fn(path: str, prompt: Prompt) -> None:
    """Call the user's function once on a real row (an empty response): ValueError in one line if
    it raises or returns anything but a number, a dict with a numeric 'score', or None."""
    fn = load_reward_fn(path)
    extra = {"prompt_id": prompt.prompt_id, "rg_entry": prompt.rg_entry}
    try:
        out = fn(prompt.data_source, "", prompt.ground_truth, extra)
    except Exception as e:
        raise ValueError(
            f"reward.fn={path!r} raised {type(e).__name__}: {e} on an empty response to prompt "
            f"{prompt.prompt_id}; it must return a score (0 for a wrong or empty answer)"
        ) from None
    score = out.get("score") if isinstance(out, dict) else out
    if out is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
        raise ValueError(
            f"reward.fn={path!r} returned {type(out).__name__} {str(out)[:60]!r}; expected a number, a dict "
            "with a numeric 'score', or None (no answer)"
        )


@dataclass
class _Unit:
    """A chunk of item indices sent as one task; `last_chance` units are singletons being retried
    after a stall or crash: failing again gives the item its final status."""

    indices: list[int]
    last_chance: bool = False


class Verifier:
    """Scores responses in a persistent worker pool. Thread-safe; call `close()` (or use `with`)."""

    def __init__(
        self,
        backend: Backend = "math_verify",
        timeout_s: float = 5.0,
        workers: int = 1,
        chunk_size: int = 16,
        startup_grace_s: float = 60.0,
        stall_slack_s: float = 5.0,
        partial_credit: bool = True,
        fn: str | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown verifier backend {backend!r}; expected one of {BACKENDS}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if workers < 1 or chunk_size < 1:
            raise ValueError(f"workers and chunk_size must be >= 1, got {workers} and {chunk_size}")
        if (backend == "custom") != (fn is not None):
            raise ValueError("the custom verifier backend needs fn='package.module:function' (and only it takes one)")
        self.backend: Backend = backend
        self.fn = fn
        # reasoning_gym only: keep a checker's partial credit as the reward, or score 1 / 0.
        self.partial_credit = partial_credit
        self.timeout_s = float(timeout_s)
        self.workers = workers
        self.chunk_size = chunk_size
        # A new pool spawns interpreters and imports math-verify/sympy: seconds on a loaded
        # 2-core machine. It gets this long to answer a ping before it counts as broken.
        self.startup_grace_s = startup_grace_s
        self.stall_slack_s = stall_slack_s
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    # -- lifecycle
    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut the worker pool down (a later score_batch starts a new one)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None

    def _get_pool(self) -> ProcessPoolExecutor:
        """The live pool, or a new one whose every worker has started and imported math-verify."""
        if self._pool is not None:
            return self._pool
        pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=worker_init,
            initargs=(self.backend, self.fn),
        )
        self._pool = pool
        # One ping per worker spawns them all now (3.11 spawns a worker per submit while none is
        # idle). Start-up failures surface here as one clear error instead of every item scored
        # 'error', and later stall windows need no start-up allowance.
        # SIGINT blocked while they spawn: the mask is inherited, so a Ctrl-C that reaches the terminal's
        # whole group while a worker's interpreter still starts (before worker_init ignores it) is no
        # "Fatal Python error" traceback; this process still gets it, from the pending set.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pings = [pool.submit(ping) for _ in range(self.workers)]
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        done, not_done = wait(pings, timeout=self.startup_grace_s)
        failure = next((f.exception() for f in done if f.exception() is not None), None)
        if not_done or failure is not None:
            self.kill_pool()
            why = f"did not start within {self.startup_grace_s} s" if failure is None else f"failed: {failure!r}"
            raise RuntimeError(
                f"verifier worker pool {why}. Workers are spawned processes that import "
                "thinking_seeds.data.verifier_worker and math_verify, and the caller's __main__ module: guard a "
                "script's entry point with `if __name__ == '__main__':`, and check that "
                "math-verify imports in this environment"
            ) from failure
        return pool

    def kill_pool(self) -> None:
        """Stop the workers now, whatever they are doing (a later score_batch starts a new pool)."""
        # shutdown() cannot stop a running task, and a stuck worker would never exit; kill the
        # processes first. (_processes is private, but 3.11 has no public way: 3.14 adds
        # kill_workers().)
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)

    @property
    def worker_pids(self) -> list[int]:
        """PIDs of the live worker processes (empty before the first call and after close())."""
        # No lock: a monitoring thread must not wait for a running batch.
        procs = dict(getattr(self._pool, "_processes", None) or {})
        return sorted(p.pid for p in procs.values() if p.is_alive())

    # -- scoring
    def _check_inputs(self, responses: Sequence[str], prompts: Sequence[Prompt]) -> None:
        if len(responses) != len(prompts):
            raise ValueError(
                f"score_batch: {len(responses)} responses but {len(prompts)} prompts; pass one prompt per response"
            )
        if self.backend == "reasoning_gym":
            from reasoning_gym.factory import DATASETS

            for p in prompts:
                if p.rg_entry is None:
                    raise ValueError(
                        f"prompt {p.prompt_id} has no rg_entry (extra_info.rg_entry), which the "
                        "'reasoning_gym' backend needs; use backend='math_verify' or build the data "
                        "with thinking_seeds.data.sources"
                    )
                if p.data_source not in DATASETS:
                    raise ValueError(
                        f"prompt {p.prompt_id}: data_source {p.data_source!r} is not a reasoning-gym "
                        "data set; use backend='math_verify'"
                    )

    def score_batch(self, responses: Sequence[str], prompts: Sequence[Prompt]) -> list[Verdict]:
        """One Verdict per response (same order); responses[i] answers prompts[i]."""
        self._check_inputs(responses, prompts)
        answers = [last_boxed(r) for r in responses]
        if self.backend == "custom":  # the user's function sees the whole response and decides
            verdicts: list[Verdict | None] = [None] * len(responses)
            items: dict[int, Item] = {
                i: (
                    r,
                    prompts[i].ground_truth,
                    prompts[i].data_source,
                    json.dumps({"prompt_id": prompts[i].prompt_id, "rg_entry": prompts[i].rg_entry}),
                )
                for i, r in enumerate(responses)
            }
        else:
            verdicts = [Verdict(0.0, "no_answer", None) if a is None else None for a in answers]
            items = {
                i: (a, prompts[i].ground_truth, prompts[i].data_source, prompts[i].rg_entry)
                for i, a in enumerate(answers)
                if a is not None
            }
        # A built-in checker is a function of the item alone: an answer repeated for the same prompt (a
        # group's or an evaluation's samples agree often) is scored once. The user's function may not
        # be (it sees the whole response, and may draw): every item goes to it.
        first: dict[Item, int] = {}
        same = {} if self.backend == "custom" else {i: first.setdefault(item, i) for i, item in items.items()}
        if items:
            with self._lock:
                results = self._run({i: item for i, item in items.items() if same.get(i, i) == i})
            for i in items:
                reward, status, detail = results[same.get(i, i)]
                verdicts[i] = Verdict(reward, status, answers[i], detail)  # type: ignore[arg-type]
        assert all(v is not None for v in verdicts)
        return verdicts  # type: ignore[return-value]

    def _run(self, items: dict[int, Item]) -> dict[int, Result]:
        indices = list(items)
        size = min(self.chunk_size, max(1, math.ceil(len(indices) / self.workers)))
        queue = [_Unit(indices[k : k + size]) for k in range(0, len(indices), size)]
        results: dict[int, Result] = {}

        def give_up_or_split(unit: _Unit, status: str, detail: str) -> list[_Unit]:
            if unit.last_chance:
                results[unit.indices[0]] = (0.0, status, detail)
                return []
            return [_Unit([i], last_chance=True) for i in unit.indices]

        while queue:
            pool = self._get_pool()
            futures: dict[Future[list[Result]], _Unit] = {}
            try:
                for unit in queue:
                    payload = [items[i] for i in unit.indices]
                    futures[pool.submit(score_chunk, self.backend, payload, self.timeout_s, self.partial_credit)] = unit
            except BrokenProcessPool:
                # A worker died between calls (killed, OOM): nothing of this round ran; redo it.
                self.kill_pool()
                continue
            # Every item is bounded by its worker's alarm, so some chunk must finish within this
            # window; the slack covers IPC and scheduling on a busy machine.
            window = max(len(u.indices) for u in queue) * self.timeout_s + self.stall_slack_s
            queue = []
            pending = set(futures)
            broken = False
            while pending:
                done, pending = wait(pending, timeout=window, return_when=FIRST_COMPLETED)
                for fut in done:
                    unit = futures[fut]
                    try:
                        for i, r in zip(unit.indices, fut.result(), strict=True):
                            results[i] = r
                    except BrokenProcessPool as e:
                        broken = True
                        queue += give_up_or_split(unit, "error", f"verifier worker crashed: {e}")
                if not done:  # stalled: a worker is stuck beyond the reach of its own alarm
                    for fut in pending:
                        unit = futures[fut]
                        if fut.running():
                            detail = f"verifier worker stalled for {window:.0f} s; pool restarted"
                            queue += give_up_or_split(unit, "timeout", detail)
                        else:
                            queue.append(unit)  # never started: innocent, resubmit as is
                    broken = True
                    break
            if broken:
                self.kill_pool()
        return results
