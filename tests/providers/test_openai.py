"""OpenAIProvider through the real SDK client, against the local wire server: what a Chat
Completions request and answer become (its failures: test_errors.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from waitstate.providers.base import ModelSettings
from waitstate.providers.openai import OpenAIProvider
from waitstate.schemas import Message, ToolCall, ToolDefinition
from waitstate.testing.wire_server import WireServer, openai_text, openai_tool_calls

LOOKUP = ToolDefinition(
    name="lookup",
    description="Look a city up.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
HELLO = [Message(role="user", content="hello")]


@pytest.fixture
async def provider(wire: WireServer) -> AsyncIterator[OpenAIProvider]:
    async with openai.AsyncOpenAI(
        api_key="test", base_url=wire.openai_base_url, max_retries=0
    ) as client:
        yield OpenAIProvider(client)


async def test_text_answer_with_usage(wire: WireServer, provider: OpenAIProvider) -> None:
    wire.enqueue(openai_text("Paris.", input_tokens=12, output_tokens=3, model="gpt-test-0001"))

    response = await provider.complete("gpt-test", "Be brief.", HELLO, [])

    assert response.message == Message(role="assistant", content="Paris.")
    assert (response.usage.model_calls, response.usage.input_tokens) == (1, 12)
    assert response.usage.output_tokens == 3
    assert response.stop_reason == "stop"
    assert response.model == "gpt-test-0001"
    assert len(wire.requests) == 1


async def test_tool_calls_survive_as_written(wire: WireServer, provider: OpenAIProvider) -> None:
    wire.enqueue(
        openai_tool_calls(
            [("call_1", "lookup", '{"city": "Paris"}'), ("call_2", "lookup", '{"city": ')]
        )
    )

    response = await provider.complete("gpt-test", "", HELLO, [LOOKUP])

    assert response.message.content == ""
    assert response.message.tool_calls == [
        ToolCall(id="call_1", name="lookup", arguments='{"city": "Paris"}'),
        # Malformed JSON is kept, not repaired or dropped.
        ToolCall(id="call_2", name="lookup", arguments='{"city": '),
    ]
    assert response.stop_reason == "tool_calls"
    assert response.model == "gpt-test"


async def test_conversation_converts_to_chat_completions_request(
    wire: WireServer, provider: OpenAIProvider
) -> None:
    conversation = [
        Message(role="user", content="Weather in Paris and Oslo?"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="call_1", name="lookup", arguments='{"city": "Paris"}'),
                ToolCall(id="call_2", name="lookup", arguments='{"city": "Oslo"}'),
            ],
        ),
        Message(role="tool", tool_call_id="call_1", name="lookup", content="sunny"),
        Message(
            role="tool", tool_call_id="call_2", name="lookup", content="no such city", is_error=True
        ),
    ]

    await provider.complete("gpt-test", "You are terse.", conversation, [LOOKUP])

    body = wire.requests[-1].body
    assert wire.requests[-1].path == "/v1/chat/completions"
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "ERROR: no such city"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look a city up.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]


async def test_no_tools_and_no_system_prompt_are_left_out(
    wire: WireServer, provider: OpenAIProvider
) -> None:
    await provider.complete("gpt-test", "", HELLO, [])

    body = wire.requests[-1].body
    assert "tools" not in body
    assert body["messages"] == [{"role": "user", "content": "hello"}]


async def test_empty_queue_plays_one_tool_round_trip(provider: OpenAIProvider) -> None:
    first = await provider.complete("gpt-test", "", HELLO, [LOOKUP])
    [call] = first.message.tool_calls
    result = Message(role="tool", tool_call_id=call.id, name="lookup", content="sunny")

    second = await provider.complete("gpt-test", "", [*HELLO, first.message, result], [LOOKUP])
    third = await provider.complete("gpt-test", "", HELLO, [])

    assert (call.name, call.arguments) == ("lookup", "{}")
    assert second.message.content == "Received 1 tool result (lookup)."
    assert third.message.content == "ok"


async def test_model_settings_reach_the_request(wire: WireServer, provider: OpenAIProvider) -> None:
    wire.enqueue(openai_text("ok"))
    await provider.complete(
        "m", "sys", [Message(role="user", content="hi")], [], ModelSettings(0.2, 300)
    )
    await provider.complete("m", "sys", [Message(role="user", content="hi")], [])

    with_settings, without = (request.body for request in wire.requests[-2:])
    assert (with_settings["temperature"], with_settings["max_completion_tokens"]) == (0.2, 300)
    assert "temperature" not in without and "max_completion_tokens" not in without
