"""OpenAIProvider through the real SDK client, against the local wire server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import openai
import pytest

from providers.base import ProviderError
from providers.openai import OpenAIProvider
from schemas import Message, ToolCall, ToolDefinition
from waitstate.testing.wire_server import WireServer, error, openai_text, openai_tool_calls

LOOKUP = ToolDefinition(
    name="lookup",
    description="Look a city up.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
HELLO = [Message(role="user", content="hello")]


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


@pytest.fixture
async def provider(server: WireServer) -> AsyncIterator[OpenAIProvider]:
    async with openai.AsyncOpenAI(
        api_key="test", base_url=server.openai_base_url, max_retries=0
    ) as client:
        yield OpenAIProvider(client)


async def test_text_answer_with_usage(server: WireServer, provider: OpenAIProvider) -> None:
    server.enqueue(openai_text("Paris.", input_tokens=12, output_tokens=3, model="gpt-test-0001"))

    response = await provider.complete("gpt-test", "Be brief.", HELLO, [])

    assert response.message == Message(role="assistant", content="Paris.")
    assert (response.usage.model_calls, response.usage.input_tokens) == (1, 12)
    assert response.usage.output_tokens == 3
    assert response.stop_reason == "stop"
    assert response.model == "gpt-test-0001"
    assert len(server.requests) == 1


async def test_tool_calls_survive_as_written(server: WireServer, provider: OpenAIProvider) -> None:
    server.enqueue(
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
    server: WireServer, provider: OpenAIProvider
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

    body = server.requests[-1].body
    assert server.requests[-1].path == "/v1/chat/completions"
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
    server: WireServer, provider: OpenAIProvider
) -> None:
    await provider.complete("gpt-test", "", HELLO, [])

    body = server.requests[-1].body
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


async def test_rate_limit_carries_retry_after(server: WireServer, provider: OpenAIProvider) -> None:
    server.enqueue(error(429, "Rate limit reached", {"retry-after": "3"}))

    with pytest.raises(ProviderError) as caught:
        await provider.complete("gpt-test", "", HELLO, [])

    assert caught.value.status == 429
    assert caught.value.retryable is True
    assert caught.value.retry_after == 3.0
    assert len(server.requests) == 1


@pytest.mark.parametrize(("status", "retryable"), [(400, False), (503, True)])
async def test_error_status_becomes_provider_error(
    server: WireServer, provider: OpenAIProvider, status: int, retryable: bool
) -> None:
    server.enqueue(error(status, "The model `nope` does not exist"))

    with pytest.raises(ProviderError) as caught:
        await provider.complete("nope", "", HELLO, [])

    assert caught.value.status == status
    assert caught.value.retryable is retryable
    assert caught.value.retry_after is None
    assert str(caught.value) == f"openai: HTTP {status}: The model `nope` does not exist"
    # max_retries=0: the SDK made no attempt of its own after the failure.
    assert len(server.requests) == 1


async def test_unreachable_server_is_retryable_without_status() -> None:
    with WireServer() as closed:
        pass
    async with openai.AsyncOpenAI(
        api_key="test", base_url=closed.openai_base_url, max_retries=0
    ) as client:
        with pytest.raises(ProviderError) as caught:
            await OpenAIProvider(client).complete("gpt-test", "", HELLO, [])

    assert caught.value.status is None
    assert caught.value.retryable is True
    assert str(caught.value).startswith("openai: no response: Connection error. ")
    # The transport's reason and the address tried, which the SDK's message leaves out.
    assert "All connection attempts failed" in str(caught.value)
    assert f"({closed.url}/v1/" in str(caught.value)
