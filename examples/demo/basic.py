"""Small, real, synchronous tools for the demo and tests."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from waitstate import ToolError, ToolSpec

_OPERATORS: dict[type[ast.AST], Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
# Every intermediate result is bounded, so `9**9**9` or `((9**999)**999)**999` is refused at
# once instead of pinning a worker's CPU and memory.
_MAX_DIGITS = 1000
_MAX_BITS = int(_MAX_DIGITS * math.log2(10))


class CalculateArgs(BaseModel):
    expression: str = Field(
        description="An arithmetic expression: numbers, + - * / // % ** and parentheses.",
        max_length=500,
    )


async def calculate(args: CalculateArgs) -> str:
    """Evaluate arithmetic exactly, without `eval`."""
    try:
        tree = ast.parse(args.expression, mode="eval")
    except SyntaxError as err:
        raise ToolError(f"not an arithmetic expression: {err.msg}") from err
    try:
        value = _evaluate(tree.body)
    except ZeroDivisionError as err:
        raise ToolError("division by zero") from err
    except OverflowError as err:
        raise ToolError("result is too large") from err
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _evaluate(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value: int | float = node.value  # type: ignore[assignment]  # checked just above
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        value = _OPERATORS[type(node.op)](_evaluate(node.operand))
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        value = _OPERATORS[type(node.op)](left, right)
    else:
        raise ToolError(f"unsupported element in expression: {ast.unparse(node)!r}")
    return _checked(value)


def _check_power(base: int | float, exponent: int | float) -> None:
    # Estimated before computing: the power itself is what would take the time.
    if not (isinstance(base, int) and isinstance(exponent, int)) or abs(base) <= 1 or exponent <= 0:
        return
    if exponent * math.log2(abs(base)) > _MAX_BITS:
        raise ToolError(f"result is too large (over {_MAX_DIGITS} digits)")


def _checked(value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError("result is not a real number")
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        raise ToolError(f"result is too large (over {_MAX_DIGITS} digits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("result is too large")
    return value


class CountWordsArgs(BaseModel):
    text: str = Field(description="The text whose words, lines and characters to count.")


async def count_words(args: CountWordsArgs) -> dict[str, int]:
    """Count words, lines and characters."""
    return {
        "words": len(args.text.split()),
        "lines": len(args.text.splitlines()) or (1 if args.text else 0),
        "characters": len(args.text),
    }


class UtcNowArgs(BaseModel):
    pass


async def utc_now(args: UtcNowArgs) -> str:
    """The current UTC time, ISO 8601, to the second."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def demo_tools() -> list[ToolSpec]:
    """The demo tool set."""
    return [
        ToolSpec(
            name="calculate",
            description="Evaluate an arithmetic expression exactly and return the result.",
            args=CalculateArgs,
            handler=calculate,
        ),
        ToolSpec(
            name="count_words",
            description="Count the words, lines and characters of a text.",
            args=CountWordsArgs,
            handler=count_words,
        ),
        ToolSpec(
            name="utc_now",
            description="Return the current date and time in UTC.",
            args=UtcNowArgs,
            handler=utc_now,
        ),
    ]
