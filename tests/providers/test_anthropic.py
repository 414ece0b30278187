"""AnthropicProvider through the real SDK client, against the local wire server: what a Messages
request and answer become (what it does as the OpenAI adapter does: test_adapters.py; its
failures: test_errors.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.providers.adapters import conversation_sent, uncached_anthropic
from waitstate.providers.anthropic import AnthropicProvider
from waitstate.providers.base import ModelSettings
from waitstate.schemas import Message
from waitstate.testing.wire_server import WireServer, anthropic_text


@pytest.fixture
async def provider(wire: WireServer) -> AsyncIterator[AnthropicProvider]:
    async with uncached_anthropic(wire.anthropic_base_url) as provider:
        yield provider


async def test_conversation_converts_to_messages_request(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    body = await conversation_sent(wire, provider, "claude-test", "/v1/messages")
    assert body["system"] == "You are terse."
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"city": "Paris"}},
                # Not a JSON object: sent as an empty input rather than failing the call.
                {"type": "tool_use", "id": "call_2", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": "sunny",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": "bad JSON",
                    "is_error": True,
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking Oslo."},
                {"type": "tool_use", "id": "call_3", "name": "lookup", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_3",
                    "content": "no such city",
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


async def test_max_tokens_of_the_settings_replace_the_providers(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    wire.enqueue(anthropic_text("ok"), anthropic_text("ok"))
    await provider.complete(
        "m", "sys", [Message(role="user", content="hi")], [], ModelSettings(max_tokens=300)
    )
    await provider.complete("m", "sys", [Message(role="user", content="hi")], [])

    assert [request.body["max_tokens"] for request in wire.requests[-2:]] == [300, 512]
