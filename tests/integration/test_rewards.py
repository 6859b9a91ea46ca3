"""The verifier: statuses, per-item timeouts, non-main threads, worker stalls and crashes, backends.

Each Verifier spawns real worker processes (~1 s to start here), so tests share a module-scoped one
where they can.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from thinking_seeds.data.chain_sum import solution
from thinking_seeds.data.rewards import Verifier
from thinking_seeds.data.sources import Message, Prompt, build_chain_sum_splits, load_dataset
from thinking_seeds.data.verdicts import STATUSES, Verdict, count_statuses, last_boxed

# sympy evaluates nested factorials of 9 for ever, in Python code an alarm can interrupt
SLOW_ANSWER = "so \\boxed{9!!!!}"


def _prompt(ground_truth: str, i: int = 0) -> Prompt:
    return Prompt(f"t-{i}", (Message("user", "q"),), ground_truth, "chain_sum")


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    with Verifier(timeout_s=2.0, chunk_size=4) as v:
        yield v


def test_last_boxed() -> None:
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{5} then cut off \\boxed{6") == "5"  # unclosed last box
    assert last_boxed("\\boxed{ }") is None and last_boxed("51") is None


def test_statuses_and_rewards(verifier: Verifier) -> None:
    gold = _prompt("51")
    cases = [
        (solution("38-57+10+60", "a"), "ok", "51"),
        (solution("38-57+10+60", "b"), "ok", "51"),
        ("b 1. \\boxed{\\frac{102}{2}}", "ok", "\\frac{102}{2}"),  # math, not string, equality
        ("\\boxed{51.0}", "ok", "51.0"),
        ("a 38-57=-19. \\boxed{-19}", "wrong", "-19"),
        ("a 38-57=-19,-19+10=-9,-9+60=51.", "no_answer", None),
        ("\\boxed{}", "no_answer", None),
    ]
    verdicts = verifier.score_batch([c[0] for c in cases], [gold] * len(cases))
    assert [(v.status, v.answer) for v in verdicts] == [(c[1], c[2]) for c in cases]
    assert [v.reward for v in verdicts] == [1.0 if c[1] == "ok" else 0.0 for c in cases]
    assert count_statuses(verdicts) == {"ok": 4, "wrong": 1, "no_answer": 2, "timeout": 0, "error": 0}
    assert list(count_statuses([])) == list(STATUSES)


def test_works_from_a_non_main_thread(verifier: Verifier) -> None:
    from math_verify import parse

    # the reason for worker processes: math-verify's alarm cannot be armed outside the main thread
    err: list[BaseException] = []
    t = threading.Thread(target=_capture, args=(err, parse, "\\boxed{1}"))
    t.start(), t.join()
    assert isinstance(err[0], ValueError) and "threaded environment" in str(err[0])

    out: list[list[Verdict]] = []
    prompts = [_prompt(str(k), k) for k in range(20)]
    responses = [f"\\boxed{{{k if k % 3 else k + 1}}}" for k in range(20)]
    t = threading.Thread(target=lambda: out.append(verifier.score_batch(responses, prompts)))
    t.start(), t.join(timeout=60)
    assert [v.status for v in out[0]] == ["wrong" if k % 3 == 0 else "ok" for k in range(20)]


def _capture(err: list[BaseException], fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001  # handed to the main thread
        err.append(e)


def test_slow_item_times_out_alone_and_the_pool_is_kept() -> None:
    with Verifier(timeout_s=0.5) as v:
        prompts = [_prompt("3"), _prompt("3"), _prompt("4")]
        t0 = time.monotonic()
        verdicts = v.score_batch(["\\boxed{3}", SLOW_ANSWER, "\\boxed{5}"], prompts)
        assert time.monotonic() - t0 < 30
        assert [v_.status for v_ in verdicts] == ["ok", "timeout", "wrong"]
        assert verdicts[1].answer == "9!!!!" and "longer than 0.5 s" in verdicts[1].detail
        pids = v.worker_pids
        assert v.score_batch(["\\boxed{3}"], prompts[:1])[0].status == "ok"
        assert v.worker_pids == pids  # an inner timeout does not cost a pool restart


def test_pool_recovers_from_stuck_and_dead_workers() -> None:
    prompts = [_prompt("3"), _prompt("3"), _prompt("4")]
    responses = ["\\boxed{3}", "\\boxed{2}", "\\boxed{4}"]
    expected = ["ok", "wrong", "ok"]
    with Verifier(timeout_s=0.5, stall_slack_s=1.0) as v:
        assert [x.status for x in v.score_batch(responses, prompts)] == expected
        # A stopped worker never answers and its alarm cannot fire: only the outer deadline helps.
        (stuck,) = v.worker_pids
        os.kill(stuck, signal.SIGSTOP)
        t0 = time.monotonic()
        assert [x.status for x in v.score_batch(responses, prompts)] == expected
        assert time.monotonic() - t0 < 30
        (fresh,) = v.worker_pids
        assert fresh != stuck
        with pytest.raises(ProcessLookupError):
            os.kill(stuck, 0)  # the stuck worker was killed, not leaked
        # A worker that died between calls is replaced on the next call.
        os.kill(fresh, signal.SIGKILL)
        time.sleep(0.2)
        assert [x.status for x in v.score_batch(responses, prompts)] == expected
        assert v.worker_pids and v.worker_pids[0] != fresh
    assert v.worker_pids == []


def test_reasoning_gym_backend(tmp_path: Path) -> None:
    paths = build_chain_sum_splits(tmp_path, train_size=0, val_size=0, test_size=4, seed=0)
    prompts = load_dataset(paths["test"])
    broken = Prompt("x-0", prompts[0].messages, "1", "chain_sum", rg_entry=json.dumps({"metadata": {}}))
    answer = prompts[1].ground_truth
    responses = [
        prompts[0].target,
        f"\\boxed{{{answer}.00}}",  # reasoning-gym's decimal tolerance
        f"\\boxed{{{int(prompts[2].ground_truth) + 1}}}",
        "no box",
        "\\boxed{1}",
    ]
    with Verifier(backend="reasoning_gym", timeout_s=2.0) as v:
        verdicts = v.score_batch(responses, prompts[:4] + [broken])
    assert [x.status for x in verdicts] == ["ok", "ok", "wrong", "no_answer", "error"]
    assert verdicts[0].reward == 1.0 and verdicts[2].reward == 0.0
    assert "KeyError" in verdicts[4].detail  # the entry lacks 'answer': counted, with the reason


def test_input_errors(verifier: Verifier) -> None:
    with pytest.raises(ValueError, match="2 responses but 1 prompts"):
        verifier.score_batch(["a", "b"], [_prompt("1")])
    with pytest.raises(ValueError, match="unknown verifier backend"):
        Verifier(backend="sympy")  # type: ignore[arg-type]
    rg = Verifier(backend="reasoning_gym")  # checks happen before any worker starts
    with pytest.raises(ValueError, match="prompt t-0 has no rg_entry"):
        rg.score_batch(["\\boxed{1}"], [_prompt("1")])
    other = Prompt("m-3", (Message("user", "q"),), "1", "my_math", rg_entry="{}")
    with pytest.raises(ValueError, match="'my_math' is not a reasoning-gym data set"):
        rg.score_batch(["\\boxed{1}"], [other])
    assert rg.worker_pids == []


def test_a_repeated_answer_to_the_same_prompt_is_scored_once(verifier: Verifier, monkeypatch) -> None:
    """The samples of a group agree often: each distinct (answer, prompt) goes to the pool once, and
    every response gets its own verdict, as if each had been scored."""
    sent: list[int] = []
    run = Verifier._run
    monkeypatch.setattr(Verifier, "_run", lambda self, items: sent.append(len(items)) or run(self, items))
    a, b = _prompt("51", 0), _prompt("7", 1)
    responses = ["\\boxed{51}", "x \\boxed{51}", "\\boxed{50}", "\\boxed{51}", "no box", "\\boxed{51}", SLOW_ANSWER]
    prompts = [a, a, a, a, a, b, b]
    got = verifier.score_batch(responses, prompts)
    assert sent == [4]  # 51 for a (three responses), 50 for a, 51 for b, the slow one; no box never goes
    one_by_one = [verifier.score_batch([r], [p])[0] for r, p in zip(responses, prompts, strict=True)]
    assert [(v.reward, v.status, v.answer) for v in got] == [(v.reward, v.status, v.answer) for v in one_by_one]
    assert [v.status for v in got] == ["ok", "ok", "wrong", "ok", "no_answer", "wrong", "timeout"]
