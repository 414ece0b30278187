"""AnthropicProvider through the real SDK client, against the local wire server: what a Messages
request and answer become (its failures: test_errors.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import pytest

from waitstate.providers.anthropic import AnthropicProvider
from waitstate.providers.base import ModelSettings
from waitstate.schemas import Message, ToolCall, ToolDefinition
from waitstate.testing.wire_server import WireServer, anthropic_text, anthropic_tool_use

LOOKUP = ToolDefinition(
    name="lookup",
    description="Look a city up.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
HELLO = [Message(role="user", content="hello")]


@pytest.fixture
async def provider(wire: WireServer) -> AsyncIterator[AnthropicProvider]:
    async with anthropic.AsyncAnthropic(
        api_key="test", base_url=wire.anthropic_base_url, max_retries=0
    ) as client:
        yield AnthropicProvider(client, max_tokens=512)


async def test_text_answer_with_usage(wire: WireServer, provider: AnthropicProvider) -> None:
    wire.enqueue(
        anthropic_text("Paris.", input_tokens=12, output_tokens=3, model="claude-test-0001")
    )

    response = await provider.complete("claude-test", "Be brief.", HELLO, [])

    assert response.message == Message(role="assistant", content="Paris.")
    assert (response.usage.model_calls, response.usage.input_tokens) == (1, 12)
    assert response.usage.output_tokens == 3
    assert response.stop_reason == "end_turn"
    assert response.model == "claude-test-0001"
    assert wire.requests[-1].body["max_tokens"] == 512
    assert len(wire.requests) == 1


async def test_tool_use_survives(wire: WireServer, provider: AnthropicProvider) -> None:
    wire.enqueue(
        anthropic_tool_use(
            [("toolu_1", "lookup", {"city": "Paris"}), ("toolu_2", "lookup", {})],
            text="Looking both up.",
        )
    )

    response = await provider.complete("claude-test", "", HELLO, [LOOKUP])

    assert response.message.content == "Looking both up."
    assert response.message.tool_calls == [
        ToolCall(id="toolu_1", name="lookup", arguments='{"city": "Paris"}'),
        ToolCall(id="toolu_2", name="lookup", arguments="{}"),
    ]
    assert response.stop_reason == "tool_use"
    assert response.model == "claude-test"


async def test_conversation_converts_to_messages_request(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    conversation = [
        Message(role="user", content="Weather in Paris and Oslo?"),
        Message(
            role="assistant",
            content="Checking.",
            tool_calls=[
                ToolCall(id="toolu_1", name="lookup", arguments='{"city": "Paris"}'),
                # Not a JSON object: sent as an empty input rather than failing the call.
                ToolCall(id="toolu_2", name="lookup", arguments='{"city": '),
            ],
        ),
        Message(role="tool", tool_call_id="toolu_1", name="lookup", content="sunny"),
        Message(
            role="tool", tool_call_id="toolu_2", name="lookup", content="bad JSON", is_error=True
        ),
        Message(role="user", content="Thanks."),
    ]

    await provider.complete("claude-test", "You are terse.", conversation, [LOOKUP])

    body = wire.requests[-1].body
    assert wire.requests[-1].path == "/v1/messages"
    assert body["model"] == "claude-test"
    assert body["system"] == "You are terse."
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "sunny",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "bad JSON",
                    "is_error": True,
                },
            ],
        },
        {"role": "user", "content": "Thanks."},
    ]
    assert body["tools"] == [
        {
            "name": "lookup",
            "description": "Look a city up.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]


async def test_no_tools_and_no_system_prompt_are_left_out(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    await provider.complete("claude-test", "", HELLO, [])

    body = wire.requests[-1].body
    assert "tools" not in body
    assert "system" not in body
    assert body["messages"] == [{"role": "user", "content": "hello"}]


async def test_empty_queue_plays_one_tool_round_trip(provider: AnthropicProvider) -> None:
    first = await provider.complete("claude-test", "", HELLO, [LOOKUP])
    [call] = first.message.tool_calls
    result = Message(role="tool", tool_call_id=call.id, name="lookup", content="sunny")

    second = await provider.complete("claude-test", "", [*HELLO, first.message, result], [LOOKUP])
    third = await provider.complete("claude-test", "", HELLO, [])

    assert (call.name, call.arguments) == ("lookup", "{}")
    assert second.message.content == "Received 1 tool result (lookup)."
    assert third.message.content == "ok"


async def test_max_tokens_of_the_settings_replace_the_providers(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    wire.enqueue(anthropic_text("ok"), anthropic_text("ok"))
    await provider.complete(
        "m", "sys", [Message(role="user", content="hi")], [], ModelSettings(max_tokens=300)
    )
    await provider.complete("m", "sys", [Message(role="user", content="hi")], [])

    assert [request.body["max_tokens"] for request in wire.requests[-2:]] == [300, 512]
