"""What the verifier says about one response: a Verdict (reward, status, answer), the statuses,
and the `\\boxed{...}` answer extraction.

Status (docs/algorithm.md §2 step 4): ok (correct) | wrong | no_answer (no `\\boxed{...}`) | timeout | error.
Light on purpose (no pool, no math-verify): data sets and reports import it without the verifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["BACKENDS", "STATUSES", "Backend", "Status", "Verdict", "count_statuses", "last_boxed"]

Status = Literal["ok", "wrong", "no_answer", "timeout", "error"]
STATUSES: tuple[Status, ...] = ("ok", "wrong", "no_answer", "timeout", "error")
Backend = Literal["math_verify", "reasoning_gym", "custom"]
BACKENDS: tuple[Backend, ...] = ("math_verify", "reasoning_gym", "custom")


@dataclass(frozen=True)
class Verdict:
    """reward in [0, 1]; answer = content of the last \\boxed{...} (None when there is none);
    detail = why, for 'timeout' and 'error' (the exception text), else None."""

    reward: float
    status: Status
    answer: str | None
    detail: str | None = None


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` with balanced braces; None if absent, unclosed or empty."""
    start = text.rfind("\\boxed{")
    while start != -1:
        depth = 0
        for i in range(start + len("\\boxed"), len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    content = text[start + len("\\boxed{") : i].strip()
                    return content or None
        # Unclosed (e.g. a truncated response): an earlier, complete box may still be the answer.
        start = text.rfind("\\boxed{", 0, start)
    return None


def count_statuses(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """{status: count} over all STATUSES (zeros included, so metric columns are stable)."""
    counts = {s: 0 for s in STATUSES}
    for v in verdicts:
        counts[v.status] += 1
    return counts
