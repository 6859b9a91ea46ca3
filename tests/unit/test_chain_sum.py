"""chain_sum formats: exact strings (a character-level model is trained on them), parsing, charset."""

from __future__ import annotations

import re

import pytest
import reasoning_gym

from thinking_seeds.data.chain_sum import (
    CHARSET,
    compact,
    evaluate,
    parse_terms,
    question,
    solution,
    strategy_of,
)


def test_exact_formats_of_the_reference_example() -> None:
    expr = compact("38 - 57 + 10 + 60")
    assert expr == "38-57+10+60"
    assert question(expr) == "Compute 38-57+10+60. Answer in \\boxed{}."
    assert solution(expr, "a") == "a 38-57=-19,-19+10=-9,-9+60=51. \\boxed{51}"
    assert solution(expr, "b") == "b 38+10=48,48+60=108,108-57=51. \\boxed{51}"


@pytest.mark.parametrize(
    ("expr", "a", "b"),
    [
        # three terms
        ("5+3-2", "a 5+3=8,8-2=6. \\boxed{6}", "b 5+3=8,8-2=6. \\boxed{6}"),
        ("5-3+2", "a 5-3=2,2+2=4. \\boxed{4}", "b 5+2=7,7-3=4. \\boxed{4}"),
        # no subtracted terms, and no added terms beyond the first
        ("1+2+3", "a 1+2=3,3+3=6. \\boxed{6}", "b 1+2=3,3+3=6. \\boxed{6}"),
        ("9-4-7", "a 9-4=5,5-7=-2. \\boxed{-2}", "b 9-4=5,5-7=-2. \\boxed{-2}"),
        # '-0' stays a subtracted step, zero first term
        ("0-0+5", "a 0-0=0,0+5=5. \\boxed{5}", "b 0+5=5,5-0=5. \\boxed{5}"),
        # degenerate lengths still give a well-formed solution
        ("12-30", "a 12-30=-18. \\boxed{-18}", "b 12-30=-18. \\boxed{-18}"),
        ("7", "a 7. \\boxed{7}", "b 7. \\boxed{7}"),
    ],
)
def test_solutions_edge_cases(expr: str, a: str, b: str) -> None:
    assert solution(expr, "a") == a
    assert solution(expr, "b") == b


def test_parse_tolerates_spaces_and_rejects_anything_else() -> None:
    assert [t.signed for t in parse_terms(" 38 - 57 +10+ 60 ")] == [38, -57, 10, 60]
    assert evaluate("38 - 57 + 10 + 60") == 51
    for bad in ["", "38-", "-5+3", "38 - -5", "3*4", "1++2", "2 3"]:
        with pytest.raises(ValueError, match="chain_sum expression"):
            parse_terms(bad)
    with pytest.raises(ValueError, match="strategy"):
        solution("1+2", "c")  # type: ignore[arg-type]


def test_strategy_of() -> None:
    assert strategy_of(solution("38-57+10+60", "a")) == "a"
    assert strategy_of(solution("38-57+10+60", "b")) == "b"
    assert strategy_of("ab 1+2=3") == "other"
    assert strategy_of(" a 1+2") == "other"  # the strategy token must open the response
    assert strategy_of("") == "other"


def test_reasoning_gym_entries_round_trip_and_are_covered_by_charset() -> None:
    """Every generated question/solution uses only CHARSET, and both strategies reach the answer."""
    ds = reasoning_gym.create_dataset(
        "chain_sum", size=300, seed=7, min_terms=3, max_terms=5, min_digits=1, max_digits=2
    )
    alphabet = set(CHARSET)
    assert CHARSET == "".join(sorted(alphabet)) and "\n" in alphabet
    seen_b_reorder = False
    for entry in ds:
        expr = compact(entry["metadata"]["expression"])
        assert evaluate(expr) == int(entry["answer"])
        for strategy in ("a", "b"):
            text = solution(expr, strategy)
            assert set(text) <= alphabet, set(text) - alphabet
            assert text.endswith(f"\\boxed{{{entry['answer']}}}")
            # each step 'x<op>y=z' is arithmetically right and chains from the previous result
            steps = text[2 : text.index(". \\boxed")].split(",")
            prev = None
            for step in steps:
                m = re.fullmatch(r"(-?\d+)([+-])(\d+)=(-?\d+)", step)
                assert m, step
                x, op, y, z = int(m[1]), m[2], int(m[3]), int(m[4])
                assert z == (x + y if op == "+" else x - y)
                assert prev is None or x == prev
                prev = z
        seen_b_reorder |= solution(expr, "a")[2:] != solution(expr, "b")[2:]
        assert set(question(expr)) <= alphabet
    assert seen_b_reorder
