"""The multi-solution testbed: reasoning-gym's `countdown` with `+` and `-` only, written as chain steps.

Why this task (issue #9): chain_sum has exactly one answer per prompt, so solution "diversity" there
is cosmetic and an off-policy prefix can only add errors. Here a prompt gives 4-5 numbers (1-30)
and a target (1-150); every number is used once, each added or subtracted. A prompt can have
several valid *sign patterns* (which numbers are subtracted), each written in many orders, and
many prompts have exactly one pattern out of 15 or 31, so some prompts are rarely solved: the
regime where RL with verifiable rewards sharpens pass@1 and can lose pass@k.

    question([19, 12, 7, 30], 54)    'Make 54 from 19,12,7,30.'
    solution([(+1,19),(+1,12),(-1,7),(+1,30)])
                                     '19+12=31,31-7=24,24+30=54. \\boxed{19+12-7+30}'

The steps are for the tiny character model (it cannot add in its head); the boxed expression is
what reasoning-gym's own countdown checker scores (any expression that uses exactly the given
numbers and hits the target counts). Formats are a contract with the character vocabulary:
changing a character invalidates the bundled model.

Diversity is measured on the *sign pattern* of a correct answer (`signature`): the sorted signed
numbers, e.g. '+12+19+30-7'. Two answers that differ only in order share a pattern.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Sequence

__all__ = [
    "CHARSET",
    "GEN_CONFIG",
    "QUESTION_TEMPLATE",
    "numbers_target",
    "question",
    "random_solution",
    "signature",
    "solution",
    "valid_patterns",
]

QUESTION_TEMPLATE = "Make {target} from {numbers}."
# reasoning-gym's generator settings for the testbed (docs/algorithm.md §7's pilot).
GEN_CONFIG = dict(
    min_numbers=4, max_numbers=5, min_value=1, max_value=30, min_target=1, max_target=150, operators=("+", "-")
)

Signed = tuple[int, int]  # (sign +1/-1, value)


def question(numbers: Sequence[int], target: int) -> str:
    return QUESTION_TEMPLATE.format(target=target, numbers=",".join(str(n) for n in numbers))


def numbers_target(entry: dict) -> tuple[list[int], int]:
    """(numbers, target) of a reasoning-gym countdown entry."""
    md = entry["metadata"]
    return [int(x) for x in md["numbers"]], int(md["target"])


def valid_patterns(numbers: Sequence[int], target: int) -> list[tuple[int, ...]]:
    """Every sign vector s (s_i in {+1, -1}) with sum(s_i * n_i) == target and at least one '+'.

    A chain starts from a number, so one term must be added; duplicate numbers give duplicate
    vectors that mean the same answer, and `signature` folds them.
    """
    out = []
    for signs in itertools.product((1, -1), repeat=len(numbers)):
        if 1 in signs and sum(s * n for s, n in zip(signs, numbers, strict=True)) == target:
            out.append(signs)
    return out


def solution(terms: Sequence[Signed]) -> str:
    """Chain steps and the boxed expression for an ordered list of signed terms (first one '+')."""
    if not terms or terms[0][0] != 1:
        raise ValueError(f"a countdown chain must start with an added number, got {terms!r}")
    acc = terms[0][1]
    steps, expr = [], str(acc)
    for sign, value in terms[1:]:
        op = "+" if sign == 1 else "-"
        new = acc + sign * value
        steps.append(f"{acc}{op}{value}={new}")
        expr += f"{op}{value}"
        acc = new
    return f"{','.join(steps)}. \\boxed{{{expr}}}"


def random_solution(numbers: Sequence[int], target: int, rng: random.Random) -> str | None:
    """A uniformly drawn valid sign pattern in a uniformly drawn order that starts with '+'."""
    patterns = sorted(set(tuple(sorted(zip(s, numbers, strict=True))) for s in valid_patterns(numbers, target)))
    if not patterns:
        return None
    terms = list(rng.choice(patterns))
    while True:  # rejection: a random order whose first term is added
        rng.shuffle(terms)
        if terms[0][0] == 1:
            return solution(terms)


_TERM = re.compile(r"([+-]?)(\d+)")


def signature(expression: str | None) -> str | None:
    """The sign pattern of a +/- expression, order-free: '19+12-7+30' -> '+12+19+30-7'.

    None for anything that is not a plain chain of integers joined by + and -.
    """
    if not expression:
        return None
    expr = "".join(expression.split())
    if not re.fullmatch(r"\d+([+-]\d+)*", expr):
        return None
    terms = sorted((sign or "+", int(v)) for sign, v in _TERM.findall(expr))  # '+' sorts before '-'
    return "".join(f"{sign}{v}" for sign, v in terms)


CHARSET: str = "".join(sorted(set(QUESTION_TEMPLATE.format(target="", numbers="") + "0123456789+-=,. \\boxed{}\n")))
"""Sorted unique characters of every question and solution string (the character vocabulary)."""
