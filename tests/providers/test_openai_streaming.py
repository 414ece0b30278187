"""OpenAIProvider streaming through the real SDK client, against the local wire server's
streamed chunks: the text reaches `on_text` piece by piece, in order, and the reply is the one
the same answer gives unstreamed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.providers.adapters import HELLO, LOOKUP, Pieces, connected
from waitstate.providers.base import ModelRequest, ProviderError
from waitstate.providers.openai import OpenAIProvider
from waitstate.testing.wire_server import (
    BrokenStream,
    WireServer,
    broken_off,
    error,
    error_event,
    openai_chunks,
    openai_text,
    openai_tool_calls,
)

CALLS = [("call_1", "lookup", '{"city": "Paris"}'), ("call_2", "lookup", '{"city": ')]


def _text_and_calls() -> dict[str, Any]:
    body = openai_tool_calls(CALLS, input_tokens=31, output_tokens=17)
    body["choices"][0]["message"]["content"] = "Looking both up."
    return body


@pytest.fixture
async def provider(wire: WireServer) -> AsyncIterator[OpenAIProvider]:
    async with connected("openai", wire.url) as provider:
        assert isinstance(provider, OpenAIProvider)
        yield provider


@pytest.mark.parametrize(
    "reply",
    [
        openai_text("The weather in Paris is sunny, in Oslo it snows.", input_tokens=12),
        openai_tool_calls(CALLS, output_tokens=9),
        _text_and_calls(),
    ],
    ids=["text", "tool-calls", "text-and-tool-calls"],
)
async def test_a_streamed_answer_is_the_unstreamed_one_and_its_text_comes_in_order(
    wire: WireServer, provider: OpenAIProvider, reply: dict[str, Any]
) -> None:
    wire.enqueue(reply, reply)
    plain = await provider.answer(ModelRequest("gpt-test", "Be terse.", HELLO, [LOOKUP]))
    pieces = Pieces()
    streamed = await provider.answer(
        ModelRequest("gpt-test", "Be terse.", HELLO, [LOOKUP], on_text=pieces)
    )

    assert streamed == plain
    assert streamed.usage.input_tokens == reply["usage"]["prompt_tokens"]
    assert streamed.usage.output_tokens == reply["usage"]["completion_tokens"]
    assert [(c.id, c.name, c.arguments) for c in streamed.message.tool_calls] == [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in reply["choices"][0]["message"].get("tool_calls") or []
    ]
    text = reply["choices"][0]["message"]["content"] or ""
    assert "".join(pieces) == streamed.message.content == text
    assert len(pieces) == (4 if text else 0)  # the wire server sends a text in four pieces
    unstreamed, asked = (request.body for request in wire.requests)
    assert "stream" not in unstreamed and "stream_options" not in unstreamed
    assert asked["stream"] is True and asked["stream_options"] == {"include_usage": True}
    assert {k: v for k, v in asked.items() if not k.startswith("stream")} == unstreamed


async def test_the_wire_servers_chunks_are_openais() -> None:
    chunks = openai_chunks(_text_and_calls(), include_usage=True)

    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    opened = [
        call
        for chunk in chunks
        for choice in chunk["choices"]
        for call in choice["delta"].get("tool_calls", [])
        if "id" in call
    ]
    assert [(c["index"], c["id"], c["function"]["name"]) for c in opened] == [
        (0, "call_1", "lookup"),
        (1, "call_2", "lookup"),
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15 + 33
    assert all(chunk["usage"] is None for chunk in chunks[:-1])


async def test_a_refused_streamed_call_fails_as_an_unstreamed_one(
    wire: WireServer, provider: OpenAIProvider
) -> None:
    wire.enqueue(error(429, "slow down", {"retry-after": "3"}))

    async def on_text(text: str) -> None:
        raise AssertionError("no text comes from a refusal")

    with pytest.raises(ProviderError) as caught:
        await provider.answer(ModelRequest("gpt-test", "", HELLO, [], on_text=on_text))

    assert (caught.value.status, caught.value.retry_after) == (429, 3.0)
    assert "slow down" in str(caught.value)


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (broken_off(3, openai_text("The weather in Paris is sunny.")), "Connection lost."),
        (error_event(3, 500, "boom", openai_text("The weather in Paris is sunny.")), "boom"),
    ],
    ids=["broken-off", "error-event"],
)
async def test_a_stream_that_fails_part_way_fails_the_call_as_one_that_got_no_answer(
    wire: WireServer, provider: OpenAIProvider, fault: BrokenStream, said: str
) -> None:
    wire.enqueue(fault)  # the role's chunk, then two pieces of the text
    pieces = Pieces()
    with pytest.raises(ProviderError) as caught:
        await provider.answer(ModelRequest("gpt-test", "", HELLO, [], on_text=pieces))

    assert caught.value.status is None and caught.value.retryable
    assert said in str(caught.value) and "/v1/chat/completions" in str(caught.value)
    assert len(pieces) == 2 and "The weather in Paris is sunny.".startswith("".join(pieces))
