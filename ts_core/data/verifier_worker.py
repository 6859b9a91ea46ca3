"""What runs inside the verifier's worker processes: scoring one chunk of answers, each item
under its own SIGALRM time limit, with math-verify, a reasoning-gym checker or the user's function.

The caller side (the pool, the per-batch stall window, retries) is `thinking_seeds.data.rewards`.
Spawned workers import this module, so it imports only what scoring needs.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import signal
import threading
from typing import Any

from thinking_seeds.data.verdicts import Backend
from thinking_seeds.plugins import load_reward_fn

__all__ = ["Item", "Result", "ping", "score_chunk", "worker_init"]

# An item sent to a worker: (answer, ground_truth, data_source, rg_entry JSON or None).
Item = tuple[str, str, str, "str | None"]
# A worker's answer for one item: (reward, status, detail).
Result = tuple[float, str, "str | None"]


class _ItemTimeout(BaseException):
    # BaseException, not Exception: math-verify and sympy catch `Exception` broadly and would
    # turn our timeout into a silent "not equal".
    pass


def _raise_item_timeout(signum: int, frame: Any) -> None:
    raise _ItemTimeout()


def ping() -> bool:
    return True


def _exit_with_parent() -> None:
    """In a worker: exit as soon as the process that spawned it is gone (kill -9 included).

    multiprocessing hands every spawned child a sentinel pipe of its parent; waiting on it costs
    nothing and wakes exactly when the parent dies, whichever thread started the pool (the
    PR_SET_PDEATHSIG alternative fires when that *thread* ends, which would kill a pool built by a
    short-lived Prefect task thread).
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def wait_then_exit() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=wait_then_exit, daemon=True, name="ts-exit-with-parent").start()


_custom_fn: Any = None


def _score_custom(text: str, ground_truth: str, data_source: str, extra_json: str | None) -> Result:
    out = _custom_fn(data_source, text, ground_truth, json.loads(extra_json or "{}"))
    if out is None:
        return 0.0, "no_answer", None
    score = out.get("score") if isinstance(out, dict) else out
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        return (
            0.0,
            "error",
            (
                f"the reward function returned {type(out).__name__} {str(out)[:80]!r}; expected a finite "
                "number, a dict with a numeric 'score', or None"
            ),
        )
    return float(score), ("ok" if score >= 1.0 else "wrong"), None


def worker_init(backend: Backend, fn: str | None = None) -> None:
    # The terminal's Ctrl-C reaches every process of its group: a worker would print a traceback of
    # its own. The parent stops the pool (or the worker exits with it, below).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    if backend == "custom":
        global _custom_fn
        _custom_fn = load_reward_fn(fn or "")
        return
    # We pass parsing_timeout=None / timeout_seconds=None (our own alarm bounds each item); that
    # makes math-verify warn once per process that it has no timeout. It is handled: silence it.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # Pay imports and lazy initialisation (sympy, the LaTeX grammar) at start-up, so the first
    # item's alarm does not count them and a small timeout_s cannot fail it spuriously.
    if backend == "math_verify":
        _score_math_verify("1", "1")
    else:
        import reasoning_gym  # noqa: F401


_rg_score_fns: dict[str, Any] = {}


def _rg_score_fn(data_source: str) -> Any:
    fn = _rg_score_fns.get(data_source)
    if fn is None:
        import reasoning_gym

        # Builds the data set with its default config once per worker; called outside the item's
        # alarm because some data sets load files when built.
        fn = _rg_score_fns[data_source] = reasoning_gym.get_score_answer_fn(data_source)
    return fn


def _score_math_verify(answer: str, ground_truth: str) -> Result:
    from math_verify import parse, verify

    gold_text = ground_truth if "\\boxed" in ground_truth else f"\\boxed{{{ground_truth}}}"
    gold = parse(gold_text, parsing_timeout=None)  # type: ignore[arg-type]
    if not gold:
        return 0.0, "error", f"math-verify cannot parse the ground truth {ground_truth!r}"
    pred = parse(f"\\boxed{{{answer}}}", parsing_timeout=None)  # type: ignore[arg-type]
    # Gold first: verify() is asymmetric (e.g. set/interval relations are judged from the gold).
    ok = verify(gold, pred, timeout_seconds=None)
    return (1.0, "ok", None) if ok else (0.0, "wrong", None)


def _score_reasoning_gym(answer: str, score_fn: Any, rg_entry: str, partial_credit: bool = True) -> Result:
    reward = float(score_fn(answer, json.loads(rg_entry)))
    if not partial_credit:  # e.g. countdown's 0.05 for "right numbers, wrong value" becomes 0
        reward = 1.0 if reward >= 1.0 else 0.0
    # reasoning-gym gives partial credit for some tasks: the reward is kept, 'ok' means full.
    return reward, ("ok" if reward >= 1.0 else "wrong"), None


def score_chunk(backend: Backend, items: list[Item], timeout_s: float, partial_credit: bool = True) -> list[Result]:
    """Runs in a worker's main thread: score items one by one, each under its own alarm.

    For the custom backend an item's first field is the whole response and its last the
    extra_info JSON (prompt id, reasoning-gym entry)."""
    previous = signal.signal(signal.SIGALRM, _raise_item_timeout)
    results: list[Result] = []
    try:
        for answer, ground_truth, data_source, rg_entry in items:
            try:
                score_fn = _rg_score_fn(data_source) if backend == "reasoning_gym" else None
                signal.setitimer(signal.ITIMER_REAL, timeout_s)
                try:
                    if backend == "custom":
                        result = _score_custom(answer, ground_truth, data_source, rg_entry)
                    elif score_fn is None:
                        result = _score_math_verify(answer, ground_truth)
                    else:
                        result = _score_reasoning_gym(answer, score_fn, rg_entry or "{}", partial_credit)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except _ItemTimeout:
                result = (0.0, "timeout", f"{backend} took longer than {timeout_s} s on answer {answer[:80]!r}")
            except Exception as e:  # a checker bug or bad input: counted as 'error', with the reason
                result = (0.0, "error", f"{type(e).__name__}: {e}"[:500])
            results.append(result)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return results
