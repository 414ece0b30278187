"""OpenAIProvider through the real SDK client, against the local wire server: what a Chat
Completions request and answer become (what it does as the Anthropic adapter does:
test_adapters.py; its failures: test_errors.py)."""

from __future__ import annotations

from tests.providers.adapters import adapter_fixture, conversation_sent
from waitstate.providers.base import ModelSettings, Provider
from waitstate.providers.openai import OpenAIProvider
from waitstate.schemas import Message
from waitstate.testing.wire_server import WireServer, openai_text

provider = adapter_fixture("openai", OpenAIProvider)


async def test_conversation_converts_to_chat_completions_request(
    wire: WireServer, provider: Provider
) -> None:
    body = await conversation_sent(wire, provider, "gpt-test", "/v1/chat/completions")
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            # The API expects null, not "", beside tool calls when the model said nothing.
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"city": "Paris"}'},
                },
                # Arguments that are not JSON are sent as the model wrote them.
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"city": '},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "ERROR: bad JSON"},
        {
            "role": "assistant",
            "content": "Checking Oslo.",
            "tool_calls": [
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": "ERROR: no such city"},
        {"role": "user", "content": "Thanks."},
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


async def test_model_settings_reach_the_request(wire: WireServer, provider: Provider) -> None:
    wire.enqueue(openai_text("ok"))
    await provider.complete(
        "m", "sys", [Message(role="user", content="hi")], [], ModelSettings(0.2, 300)
    )
    await provider.complete("m", "sys", [Message(role="user", content="hi")], [])

    with_settings, without = (request.body for request in wire.requests[-2:])
    assert (with_settings["temperature"], with_settings["max_completion_tokens"]) == (0.2, 300)
    assert "temperature" not in without and "max_completion_tokens" not in without
