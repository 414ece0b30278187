"""The demo tools, called directly: exact arithmetic, word counts and the clock."""

from __future__ import annotations

import ast
import operator
from datetime import UTC, datetime, timedelta

import pytest

from examples.demo import basic
from examples.demo.basic import (
    CalculateArgs,
    CountWordsArgs,
    UtcNowArgs,
    calculate,
    count_words,
    utc_now,
)
from waitstate.tools.spec import ToolError


async def calc(expression: str) -> str:
    return await calculate(CalculateArgs(expression=expression))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("6 * 7", "42"),
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("10 - 4 - 3", "3"),
        ("-2 ** 2", "-4"),
        ("-(3 - 5)", "2"),
        ("+5", "5"),
        ("7 / 2", "3.5"),
        # A float that is a whole number reads as an integer.
        ("8 / 2", "4"),
        ("1.5 * 3", "4.5"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("17 % 5", "2"),
        ("2 ** 10", "1024"),
        ("2 ** -1", "0.5"),
        # Right-associative, as in Python: 2 ** 9.
        ("2 ** 3 ** 2", "512"),
        # Integers stay exact well past float precision.
        ("2 ** 64 + 1", "18446744073709551617"),
        ("123456789 * 987654321", "121932631112635269"),
    ],
)
async def test_calculate(expression: str, expected: str) -> None:
    assert await calc(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("2 +", "not an arithmetic expression"),
        ("(1 + 2", "not an arithmetic expression"),
        ("__import__('os')", "unsupported element"),
        ("a + 1", "unsupported element in expression: 'a'"),
        ("'a' * 3", "unsupported element"),
        ("True + 1", "unsupported element"),
        ("[1, 2]", "unsupported element"),
        ("1 < 2", "unsupported element"),
        ("2 ** 4000", "too large"),
    ],
)
async def test_calculate_rejects(expression: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await calc(expression)


@pytest.fixture
def powers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int | float, int | float]]:
    """Every power the calculator actually computes, in order: the proof that a huge power is
    refused before the work, with no clock involved."""
    computed: list[tuple[int | float, int | float]] = []

    def power(base: int | float, exponent: int | float) -> int | float:
        computed.append((base, exponent))
        result: int | float = operator.pow(base, exponent)
        return result

    monkeypatch.setitem(basic._OPERATORS, ast.Pow, power)
    return computed


@pytest.mark.parametrize(
    ("expression", "computed"),
    [
        # 9**387420489 would have 370 million digits: refused from the estimate of its size.
        ("9**9**9", [(9, 9)]),
        ("((9**999)**999)**999", [(9, 999)]),
        ("10 ** 1000", []),
    ],
)
async def test_a_power_too_large_is_refused_before_it_is_computed(
    powers: list[tuple[int | float, int | float]],
    expression: str,
    computed: list[tuple[int, int]],
) -> None:
    with pytest.raises(ToolError, match="too large"):
        await calc(expression)

    assert powers == computed


@pytest.mark.parametrize(
    "expression",
    ["(10 ** 1000) ** 5", "10.0 ** 400", "((9**999)**999)**999", "1e308 * 10", "(-8) ** 0.5"],
)
async def test_oversized_or_unreal_results_are_tool_errors(expression: str) -> None:
    with pytest.raises(ToolError):
        await calc(expression)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {"words": 0, "lines": 0, "characters": 0}),
        ("hello", {"words": 1, "lines": 1, "characters": 5}),
        ("the quick  brown fox", {"words": 4, "lines": 1, "characters": 20}),
        ("one\ntwo three\n", {"words": 3, "lines": 2, "characters": 14}),
        ("   ", {"words": 0, "lines": 1, "characters": 3}),
    ],
)
async def test_count_words(text: str, expected: dict[str, int]) -> None:
    assert await count_words(CountWordsArgs(text=text)) == expected


async def test_utc_now_is_iso_utc_to_the_second() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    stamp = await utc_now(UtcNowArgs())
    after = datetime.now(UTC)

    when = datetime.fromisoformat(stamp)
    assert stamp.endswith("+00:00")
    assert when.utcoffset() == timedelta(0)
    assert when.microsecond == 0
    assert before <= when <= after, "the clock read during the call, to the second"
