"""The default RL task: reasoning-gym's `chain_sum` rendered in fixed, character-stable formats.

A tiny character-level model is trained on these strings (docs/algorithm.md §7), so every format here is a
contract: changing a character changes the vocabulary and invalidates checkpoints.

    expression (reasoning-gym)  '38 - 57 + 10 + 60'
    compact(expression)         '38-57+10+60'
    question(compact)           'Compute 38-57+10+60. Answer in \\boxed{}.'
    solution(compact, 'a')      'a 38-57=-19,-19+10=-9,-9+60=51. \\boxed{51}'
    solution(compact, 'b')      'b 38+10=48,48+60=108,108-57=51. \\boxed{51}'

The leading strategy token names how the sum is worked out:

- `a`: left to right, one partial sum per step;
- `b`: the first term, then every added term, then every subtracted term (each group in its
  original order), with the same pairwise step format.

The share of `b` among sampled responses is the task's cheap diversity measure (docs/algorithm.md §7): plain
GRPO drives it towards 0. Expressions are parsed by a small tokenizer (never `eval`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CHARSET",
    "QUESTION_TEMPLATE",
    "STRATEGIES",
    "Strategy",
    "Term",
    "compact",
    "evaluate",
    "parse_terms",
    "question",
    "solution",
    "strategy_of",
]

Strategy = Literal["a", "b"]
STRATEGIES: tuple[Strategy, ...] = ("a", "b")

# `{expr}` is the only placeholder; the doubled braces render the literal `\boxed{}`.
QUESTION_TEMPLATE = "Compute {expr}. Answer in \\boxed{{}}."


@dataclass(frozen=True)
class Term:
    """One term of a chain sum: `op` is the operator in front of it ('+' for the first term)."""

    op: Literal["+", "-"]
    value: int  # >= 0: the sign lives in `op`, so '-0' stays a subtracted term

    @property
    def signed(self) -> int:
        return self.value if self.op == "+" else -self.value


# An unsigned integer or an operator, with optional spaces between tokens.
_TOKEN = re.compile(r"\s*(?:(\d+)|([+-]))")


def parse_terms(expr: str) -> list[Term]:
    """Tokenize `int ((+|-) int)*` (spaces allowed) into terms.

    Raises ValueError naming the position of the first character that does not fit, e.g. a
    leading sign: reasoning-gym's `allow_negation=True` writes '38 - -5', which this task does
    not support (its first term is always a non-negative constant).
    """
    terms: list[Term] = []
    pos = 0
    expect_number = True
    op: Literal["+", "-"] = "+"
    while True:
        if pos == len(expr) or expr[pos:].strip() == "":
            break
        m = _TOKEN.match(expr, pos)
        if m is None or (expect_number and m.group(1) is None) or (not expect_number and m.group(2) is None):
            wanted = "an unsigned integer" if expect_number else "'+' or '-'"
            raise ValueError(
                f"chain_sum expression {expr!r}: expected {wanted} at position {pos} "
                f"(found {expr[pos : pos + 5]!r}); only non-negative integers joined by + and - are "
                "supported (reasoning-gym's allow_negation must stay False)"
            )
        if expect_number:
            terms.append(Term(op=op, value=int(m.group(1))))
        else:
            op = m.group(2)  # type: ignore[assignment]  # the regex only matches '+' or '-'
        expect_number = not expect_number
        pos = m.end()
    if not terms or expect_number:
        raise ValueError(f"chain_sum expression {expr!r} is empty or ends with an operator; expected e.g. '38-57+10'")
    return terms


def evaluate(expr: str) -> int:
    """The value of a chain sum expression (no eval)."""
    return sum(t.signed for t in parse_terms(expr))


def compact(expression: str) -> str:
    """'38 - 57 + 10 + 60' -> '38-57+10+60' (all whitespace removed)."""
    return "".join(expression.split())


def question(expr: str) -> str:
    """The prompt text: 'Compute 38-57+10+60. Answer in \\boxed{}.' (pass a compact expression)."""
    return QUESTION_TEMPLATE.format(expr=expr)


def _ordered(terms: list[Term], strategy: Strategy) -> list[Term]:
    if strategy == "a":
        return terms
    if strategy == "b":
        first, rest = terms[0], terms[1:]
        return [first] + [t for t in rest if t.op == "+"] + [t for t in rest if t.op == "-"]
    raise ValueError(f"unknown chain_sum strategy {strategy!r}; expected one of {STRATEGIES}")


def solution(expr: str, strategy: Strategy) -> str:
    """A worked solution, e.g. 'a 38-57=-19,-19+10=-9,-9+60=51. \\boxed{51}'.

    One step 'acc<op>value=new' per term after the first, joined by ','. Strategy `b` reorders
    the terms (the result is the same, the steps differ). A single-term expression has no step
    and renders as 'a 7. \\boxed{7}'.
    """
    terms = _ordered(parse_terms(expr), strategy)
    acc = terms[0].signed
    steps: list[str] = []
    for t in terms[1:]:
        new = acc + t.signed
        steps.append(f"{acc}{t.op}{t.value}={new}")
        acc = new
    body = ",".join(steps) if steps else str(acc)
    return f"{strategy} {body}. \\boxed{{{acc}}}"


def strategy_of(response_text: str) -> Literal["a", "b", "other"]:
    """Which strategy a response opens with: its first character 'a'/'b' followed by a space."""
    head = response_text[:2]
    if head in ("a ", "b "):
        return head[0]  # type: ignore[return-value]
    return "other"


# Everything question() and solution() can emit: the template's letters and punctuation, digits,
# operators and step separators, strategy tokens, and '\n' (the separator a trainer puts between a
# question and its solution).
CHARSET: str = "".join(
    sorted(set(QUESTION_TEMPLATE.format(expr="") + "0123456789+-=,. " + "".join(STRATEGIES) + "\\{}\n"))
)
"""Sorted unique characters of every question and solution string (a character vocabulary)."""
