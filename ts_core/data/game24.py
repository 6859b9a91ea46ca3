"""The 24 game, a task where the continuation decides (issue #26): four numbers from 1-13, make 24
with + - * / (exact arithmetic, fractions allowed), written as chain steps.

Why this task: on +/- countdown the first ~16 tokens (the span a seed takes) decide the outcome, so
a historical prefix cannot help or hurt the continuation. Here each step combines two available
numbers into a new one, and after a one-step seed the continuation faces a real 3-number
subproblem that can still be solvable or already dead (`partial_state`).

    question([8, 3, 8, 3])   'Make 24 from 8,3,8,3.'
    a solution               '8/3=8/3\\n3-(8/3)=1/3\\n8/(1/3)=24\\n\\boxed{8/(3-(8/3))}'

A step is `A op B=C` with C = A op B exactly; a fractional operand is written in parentheses
`(p/q)`, a fractional result as `p/q`. The boxed expression (the steps composed) is what is scored.

Scoring: reasoning-gym's *countdown* checker (rows carry data_source 'countdown'; it parses the
expression with sympy, so 8/(3-8/3) is exactly 24, and requires the literal integers to be the given
numbers). NOT reasoning-gym's `puzzle24` scorer: in reasoning-gym 0.1.25 it never checks that the
answer uses the given numbers (`6*4*1*1` scores 1.0 for [8, 5, 10, 6]) and truncates the value with
int() (`7*7/2*1` = 24.5 scores 1.0). tests/unit/test_game24.py shows ours refuses both.

Problems: reasoning-gym's countdown generator draws a random left-to-right expression ((a∘b)∘c)∘d
with integer division only, up to 100 times until its value lies in [min_target, max_target] (else it
raises), so with the target fixed at 24 it never draws a multiset that needs a fraction (e.g.
[3, 3, 8, 8]) or (a∘b)∘(c∘d), and draws the rest far from uniformly. The task therefore enumerates
the problem space itself: the 1,820 multisets of four numbers from 1-13, of which 1,362 can make 24 (`solvable`,
over the rationals), split by multiset (`game24_data`). Formats are a contract with the character
vocabulary: changing a character invalidates the bundled model.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from thinking_seeds.data.countdown import QUESTION_TEMPLATE, question

__all__ = [
    "CHARSET",
    "NUMBERS",
    "TARGET",
    "PartialState",
    "all_multisets",
    "canonical",
    "chain_text",
    "partial_state",
    "question",
    "solutions",
    "solvable",
    "solvable_multisets",
]

TARGET = 24
NUMBERS = range(1, 14)  # 1-13, four of them

Step = tuple[Fraction, str, Fraction, Fraction]  # (a, op, b, a op b)


# The searches below (every multiset's solvability, every solution chain) use a rational as a pair
# (numerator, denominator > 0) in lowest terms: as exact as Fraction and unique per value, so it can be a
# cache key, but ~10x cheaper to build and hash. It is what made building the splits take seconds.
Q = tuple[int, int]


def _q(x: int | Fraction) -> Q:
    f = Fraction(x)
    return (f.numerator, f.denominator)


def _reduced(n: int, d: int) -> Q:
    if d < 0:
        n, d = -n, -d
    g = math.gcd(n, d)
    return (n // g, d // g)


def _apply_q(a: Q, op: str, b: Q) -> Q | None:
    (an, ad), (bn, bd) = a, b
    if op == "+":
        return _reduced(an * bd + bn * ad, ad * bd)
    if op == "-":
        return _reduced(an * bd - bn * ad, ad * bd)
    if op == "*":
        return _reduced(an * bn, ad * bd)
    return None if bn == 0 else _reduced(an * bd, ad * bn)


def _pairs(values: tuple[Q, ...]):
    """(i, j, rest) for every unordered pair of positions."""
    for i, j in itertools.combinations(range(len(values)), 2):
        yield values[i], values[j], tuple(v for k, v in enumerate(values) if k not in (i, j))


@cache
def _solvable(values: tuple[Q, ...], target: Q) -> bool:
    if len(values) == 1:
        return values[0] == target
    for a, b, rest in _pairs(values):
        for x, op, y in ((a, "+", b), (a, "*", b), (a, "-", b), (b, "-", a), (a, "/", b), (b, "/", a)):
            c = _apply_q(x, op, y)
            if c is not None and _solvable(tuple(sorted((*rest, c))), target):
                return True
    return False


def solvable(values: Sequence[int | Fraction], target: int = TARGET) -> bool:
    """Can `values` (each used once) make `target` with + - * / over the rationals?"""
    return _solvable(tuple(sorted(_q(v) for v in values)), _q(target))


def all_multisets() -> list[tuple[int, ...]]:
    """The 1,820 multisets of four numbers from 1-13, sorted."""
    return list(itertools.combinations_with_replacement(NUMBERS, 4))


def solvable_multisets() -> list[tuple[int, ...]]:
    """The 1,362 multisets that can make 24."""
    return [m for m in all_multisets() if solvable(m)]


def _fmt_q(n: int, d: int) -> str:
    return str(n) if d == 1 else f"{n}/{d}"


def _operand_q(n: int, d: int) -> str:
    return _fmt_q(n, d) if d == 1 and n >= 0 else f"({_fmt_q(n, d)})"


def _step_text_q(a: Q, op: str, b: Q, c: Q) -> str:
    return f"{_operand_q(*a)}{op}{_operand_q(*b)}={_fmt_q(*c)}"


@cache
def _chains(values: tuple[Q, ...], target: Q) -> tuple[tuple[str, ...], ...]:
    """Every step sequence from `values` to `target` with non-negative intermediates, as step texts;
    commutative steps are written larger operand first (a+b and b+a are one step), so duplicates are
    cosmetic only."""
    if len(values) == 1:
        return ((),) if values[0] == target else ()
    out: set[tuple[str, ...]] = set()
    for a, b, rest in _pairs(values):
        hi, lo = (a, b) if a[0] * b[1] >= b[0] * a[1] else (b, a)
        for x, op, y in ((hi, "+", lo), (hi, "*", lo), (hi, "-", lo), (a, "/", b), (b, "/", a)):
            c = _apply_q(x, op, y)
            if c is None or c[0] < 0:
                continue
            for tail in _chains(tuple(sorted((*rest, c))), target):
                out.add((_step_text_q(x, op, y, c), *tail))
    return tuple(out)


def solutions(numbers: Sequence[int], target: int = TARGET) -> list[str]:
    """Every distinct chain-step solution of `numbers` (text without the boxed line), sorted."""
    chains = _chains(tuple(sorted(_q(n) for n in numbers)), _q(target))
    return sorted({"\n".join(chain) for chain in chains})


def _expression(numbers: Sequence[int], steps: Sequence[Step]) -> str:
    """The boxed expression of a step sequence: each step's result replaced by its sub-expression."""
    pool: list[tuple[Fraction, str]] = [(Fraction(n), str(n)) for n in numbers]

    def take(v: Fraction) -> str:
        for k, (value, expr) in enumerate(pool):
            if value == v:
                del pool[k]
                return expr
        raise ValueError(f"{_fmt_q(*_q(v))} is not available")

    for a, op, b, c in steps:
        ea, eb = take(a), take(b)
        pool.append((c, f"({ea}{op}{eb})"))
    ((_, expr),) = pool
    return expr[1:-1] if expr.startswith("(") else expr


def chain_text(numbers: Sequence[int], steps_text: str) -> str:
    """A full answer: the step lines, then the boxed expression they compose."""
    state = partial_state(numbers, steps_text + "\n")
    if not state.steps_ok or len(state.remaining) != 1:
        raise ValueError(f"not a complete chain for {list(numbers)}: {steps_text!r}")
    return f"{steps_text}\n\\boxed{{{_expression(numbers, state.steps)}}}"


_VALUE = r"-?\d+(?:/\d+)?"
_OPERAND = rf"(?:\d+|\({_VALUE}\))"
_STEP = re.compile(rf"({_OPERAND})([+\-*/])({_OPERAND})=({_VALUE})")


def _value(text: str) -> Fraction:
    return Fraction(text.strip("()"))


def _zero_denominator(text: str) -> bool:
    num, _, den = text.strip("()").partition("/")
    return bool(den) and int(den) == 0


@dataclass(frozen=True)
class PartialState:
    """What a partial answer (a prefix of chain steps) leaves: `remaining` is the multiset still to
    combine; `steps_ok` False when a complete line is not a valid step on the available numbers (then
    `remaining` is the state before it); `reachable` whether 24 can still be made from `remaining`."""

    remaining: tuple[Fraction, ...]
    steps: tuple[Step, ...]
    steps_ok: bool
    reachable: bool


def partial_state(numbers: Sequence[int], text: str, target: int = TARGET) -> PartialState:
    """Apply the complete step lines of `text` (those ended by a newline, before any `\\boxed`) to
    `numbers`. A dead prefix is one with `reachable` False: no continuation can be right."""
    pool = [Fraction(n) for n in numbers]
    steps: list[Step] = []
    body = text.split("\\boxed", 1)[0]
    lines = body.split("\n")[:-1]  # the last piece is unfinished (or empty)
    ok = True
    for line in lines:
        m = _STEP.fullmatch(line.strip())
        if m is None or any(_zero_denominator(g) for g in (m[1], m[3], m[4])):  # a model may write "8/0"
            ok = False
            break
        a, op, b, c = _value(m[1]), m[2], _value(m[3]), _value(m[4])
        avail = list(pool)
        if a not in avail or (avail.remove(a) or b not in avail) or _apply_q(_q(a), op, _q(b)) != _q(c):
            ok = False
            break
        avail.remove(b)
        pool = [*avail, c]
        steps.append((a, op, b, c))
    remaining = tuple(sorted(pool))
    return PartialState(remaining, tuple(steps), ok, ok and solvable(remaining, target))


def canonical(expression: str | None) -> str | None:
    """Order-free form of an answer expression (the diversity label): + and * flattened and their
    operands sorted, so '(8-5)*(10-6)' and '(10-6)*(8-5)' are one solution. None if unparsable."""
    if not expression:
        return None
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return None

    def flat(node: ast.AST, op: type) -> list[ast.AST]:
        if isinstance(node, ast.BinOp) and isinstance(node.op, op):
            return flat(node.left, op) + flat(node.right, op)
        return [node]

    def form(node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return str(node.value)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, (ast.Add, ast.Mult)):
                sym = "+" if isinstance(node.op, ast.Add) else "*"
                return "(" + sym.join(sorted(form(n) for n in flat(node, type(node.op)))) + ")"
            sym = {ast.Sub: "-", ast.Div: "/"}.get(type(node.op))
            if sym:
                return f"({form(node.left)}{sym}{form(node.right)})"
        raise ValueError("not + - * / on integers")

    try:
        return form(tree)
    except (ValueError, RecursionError):
        return None


CHARSET: str = "".join(sorted(set(QUESTION_TEMPLATE.format(target="", numbers="") + "0123456789+-*/=(),. \n\\boxed{}")))
"""Sorted unique characters of every question and solution string (the character vocabulary)."""
