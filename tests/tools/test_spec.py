"""ToolRegistry: how a call is validated, run, and turned into a result the model reads."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from examples.demo.basic import CalculateArgs, demo_tools
from tests.upstream import pydantic_says
from waitstate.schemas import ToolCall
from waitstate.tools import ToolError, ToolRegistry, ToolSpec
from waitstate.tools.spec import Handler


class EchoArgs(BaseModel):
    value: str = Field(description="Anything.")


def spec(name: str, handler: Handler) -> ToolSpec:
    return ToolSpec(name=name, description=f"The {name} tool.", args=EchoArgs, handler=handler)


def call(name: str, arguments: str) -> ToolCall:
    return ToolCall(id="call_1", name=name, arguments=arguments)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry(demo_tools())


async def test_valid_call_returns_content(registry: ToolRegistry) -> None:
    result = await registry.run(call("calculate", '{"expression": "6 * 7"}'))

    assert (result.tool_call_id, result.name, result.content, result.is_error) == (
        "call_1",
        "calculate",
        "42",
        False,
    )


@pytest.mark.parametrize("arguments", ["", "{}"])
async def test_empty_arguments_mean_no_arguments(registry: ToolRegistry, arguments: str) -> None:
    result = await registry.run(call("utc_now", arguments))

    assert result.is_error is False
    assert result.content.endswith("+00:00")


async def test_malformed_json_is_an_error_result(registry: ToolRegistry) -> None:
    result = await registry.run(call("calculate", '{"expression": "1 +'))

    assert result.is_error is True
    assert "arguments are not valid JSON" in result.content
    assert "send a JSON object" in result.content


@pytest.mark.parametrize(
    ("arguments", "where", "kind"),
    [
        ('{"expr": "2 + 2"}', "expression", "missing"),
        ('{"expression": 4}', "expression", "string_type"),
        ("[1, 2]", "(arguments)", "model_type"),
    ],
)
async def test_invalid_arguments_name_the_field(
    registry: ToolRegistry, arguments: str, where: str, kind: str
) -> None:
    result = await registry.run(call("calculate", arguments))

    # The field (or the whole) is ours to name; why, pydantic's to say.
    why = pydantic_says(CalculateArgs, json.loads(arguments), kind)
    assert result.is_error is True
    assert result.content == f"invalid arguments for calculate: {where}: {why}"


async def test_unknown_tool_lists_available_tools(registry: ToolRegistry) -> None:
    result = await registry.run(call("delete_everything", "{}"))

    assert result.is_error is True
    assert result.content == (
        "unknown tool 'delete_everything'; available: calculate, count_words, utc_now"
    )


async def test_tool_error_becomes_an_error_result(registry: ToolRegistry) -> None:
    result = await registry.run(call("calculate", '{"expression": "1 / 0"}'))

    assert (result.content, result.is_error) == ("division by zero", True)


async def test_other_exceptions_propagate() -> None:
    async def broken(args: EchoArgs) -> str:
        raise RuntimeError("disk on fire")

    registry = ToolRegistry([spec("broken", broken)])

    with pytest.raises(RuntimeError, match="disk on fire"):
        await registry.run(call("broken", '{"value": "x"}'))


async def test_handler_tool_error_message_is_passed_on() -> None:
    async def picky(args: EchoArgs) -> str:
        raise ToolError(f"nothing found for {args.value!r}")

    result = await ToolRegistry([spec("picky", picky)]).run(call("picky", '{"value": "x"}'))

    assert (result.content, result.is_error) == ("nothing found for 'x'", True)


class Point(BaseModel):
    x: int
    y: int


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("plain", "plain"),
        ({"words": 2, "ok": True}, {"words": 2, "ok": True}),
        (Point(x=1, y=2), {"x": 1, "y": 2}),
        ([1, "two"], [1, "two"]),
    ],
)
async def test_outputs_are_serialized_as_text(output: object, expected: object) -> None:
    async def handler(args: EchoArgs) -> object:
        return output

    result = await ToolRegistry([spec("out", handler)]).run(call("out", '{"value": "x"}'))

    assert result.is_error is False
    content = result.content if isinstance(expected, str) else json.loads(result.content)
    assert content == expected


def test_definitions_carry_field_descriptions(registry: ToolRegistry) -> None:
    calculate, utc_now = registry.definitions(["calculate", "utc_now"])

    assert calculate.name == "calculate"
    assert calculate.description == (
        "Evaluate an arithmetic expression exactly and return the result."
    )
    assert calculate.parameters["required"] == ["expression"]
    assert calculate.parameters["properties"]["expression"]["description"] == (
        "An arithmetic expression: numbers, + - * / // % ** and parentheses."
    )
    assert utc_now.name == "utc_now"
    assert utc_now.parameters["properties"] == {}


def test_definitions_are_built_once_per_tool(registry: ToolRegistry) -> None:
    # Every model call sends them: the JSON schema is generated on first use only.
    (first,) = registry.definitions(["calculate"])
    again, _ = registry.definitions(["calculate", "utc_now"])

    assert again is first


def test_definitions_reject_unknown_names(registry: ToolRegistry) -> None:
    with pytest.raises(KeyError, match="unknown tools: nope; known: calculate, count_words"):
        registry.definitions(["calculate", "nope"])


def test_duplicate_names_are_rejected() -> None:
    async def handler(args: EchoArgs) -> str:
        return args.value

    with pytest.raises(ValueError, match="tool 'twice' is declared twice"):
        ToolRegistry([spec("twice", handler), spec("twice", handler)])


def test_lookups(registry: ToolRegistry) -> None:
    assert registry.names() == ["calculate", "count_words", "utc_now"]
    assert registry.get("calculate") is not None
    assert registry.get("nope") is None
    assert registry.unknown(["utc_now", "nope", "rm"]) == ["nope", "rm"]
