"""What the OpenAI and Anthropic adapters do alike, through each real SDK client against the
local wire server (what each protocol's request and answer become: test_openai.py and
test_anthropic.py; failures: test_errors.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.providers.adapters import HELLO, LOOKUP, PROVIDERS, connected
from waitstate.schemas import Message, ToolCall
from waitstate.testing.wire_server import (
    WireServer,
    anthropic_text,
    anthropic_tool_use,
    openai_text,
    openai_tool_calls,
)


@pytest.mark.parametrize(
    ("name", "text", "stop_reason"),
    [("openai", openai_text, "stop"), ("anthropic", anthropic_text, "end_turn")],
)
async def test_text_answer_with_usage(
    wire: WireServer, name: str, text: Callable[..., dict[str, Any]], stop_reason: str
) -> None:
    wire.enqueue(text("Paris.", input_tokens=12, output_tokens=3, model="test-model-0001"))

    async with connected(name, wire.url) as provider:
        response = await provider.complete("test-model", "Be brief.", HELLO, [])

    assert response.message == Message(role="assistant", content="Paris.")
    assert (response.usage.model_calls, response.usage.input_tokens) == (1, 12)
    assert response.usage.output_tokens == 3
    assert response.stop_reason == stop_reason
    assert response.model == "test-model-0001"
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    ("name", "reply", "content", "calls", "stop_reason"),
    [
        (
            "openai",
            openai_tool_calls(
                [("call_1", "lookup", '{"city": "Paris"}'), ("call_2", "lookup", '{"city": ')]
            ),
            "",
            [
                ToolCall(id="call_1", name="lookup", arguments='{"city": "Paris"}'),
                # Malformed JSON is kept, not repaired or dropped.
                ToolCall(id="call_2", name="lookup", arguments='{"city": '),
            ],
            "tool_calls",
        ),
        (
            "anthropic",
            anthropic_tool_use(
                [("toolu_1", "lookup", {"city": "Paris"}), ("toolu_2", "lookup", {})],
                text="Looking both up.",
            ),
            "Looking both up.",
            [
                ToolCall(id="toolu_1", name="lookup", arguments='{"city": "Paris"}'),
                ToolCall(id="toolu_2", name="lookup", arguments="{}"),
            ],
            "tool_use",
        ),
    ],
    ids=PROVIDERS,
)
async def test_tool_calls_survive(
    wire: WireServer,
    name: str,
    reply: dict[str, Any],
    content: str,
    calls: list[ToolCall],
    stop_reason: str,
) -> None:
    wire.enqueue(reply)

    async with connected(name, wire.url) as provider:
        response = await provider.complete("test-model", "", HELLO, [LOOKUP])

    assert response.message.content == content
    assert response.message.tool_calls == calls
    assert response.stop_reason == stop_reason
    assert response.model == "test-model"


@pytest.mark.parametrize("name", PROVIDERS)
async def test_no_tools_and_no_system_prompt_are_left_out(wire: WireServer, name: str) -> None:
    async with connected(name, wire.url) as provider:
        await provider.complete("test-model", "", HELLO, [])

    body = wire.requests[-1].body
    assert "tools" not in body
    assert "system" not in body
    assert body["messages"] == [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("name", PROVIDERS)
async def test_empty_queue_plays_one_tool_round_trip(wire: WireServer, name: str) -> None:
    async with connected(name, wire.url) as provider:
        first = await provider.complete("test-model", "", HELLO, [LOOKUP])
        [call] = first.message.tool_calls
        result = Message(role="tool", tool_call_id=call.id, name="lookup", content="sunny")

        second = await provider.complete(
            "test-model", "", [*HELLO, first.message, result], [LOOKUP]
        )
        third = await provider.complete("test-model", "", HELLO, [])

    assert (call.name, call.arguments) == ("lookup", "{}")
    assert second.message.content == "Received 1 tool result (lookup)."
    assert third.message.content == "ok"
