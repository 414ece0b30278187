"""OpenAIResponsesProvider streaming through the real SDK client, against the local wire
server's Responses events: the text reaches `on_text` piece by piece, in order, and the reply
is the one the same answer gives unstreamed, reasoning items included."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.providers.adapters import HELLO, LOOKUP, Pieces, connected
from waitstate.providers.base import ModelRequest, ProviderError
from waitstate.providers.openai_responses import OpenAIResponsesProvider
from waitstate.testing.wire_server import (
    BrokenStream,
    WireServer,
    broken_off,
    error,
    error_event,
    responses_events,
    responses_function_calls,
    responses_text,
)

CALLS = [("call_1", "lookup", '{"city": "Paris"}'), ("call_2", "lookup", '{"city": ')]
SUNNY = "The weather in Paris is sunny."


@pytest.fixture
async def provider(wire: WireServer) -> AsyncIterator[OpenAIResponsesProvider]:
    async with connected("openai-responses", wire.url) as provider:
        assert isinstance(provider, OpenAIResponsesProvider)
        yield provider


@pytest.mark.parametrize(
    "reply",
    [
        responses_text("The weather in Paris is sunny, in Oslo it snows.", input_tokens=12),
        responses_function_calls(CALLS, output_tokens=9),
        responses_function_calls(CALLS, text="Looking both up.", input_tokens=31),
        responses_function_calls(CALLS, text="Looking.", reasoning="enc-1"),
    ],
    ids=["text", "function-calls", "text-and-function-calls", "reasoning"],
)
async def test_a_streamed_answer_is_the_unstreamed_one_and_its_text_comes_in_order(
    wire: WireServer, provider: OpenAIResponsesProvider, reply: dict[str, Any]
) -> None:
    wire.enqueue(reply, reply)
    plain = await provider.answer(ModelRequest("gpt-test", "Be terse.", HELLO, [LOOKUP]))
    pieces = Pieces()
    streamed = await provider.answer(
        ModelRequest("gpt-test", "Be terse.", HELLO, [LOOKUP], on_text=pieces)
    )

    assert streamed == plain
    assert streamed.usage.input_tokens == reply["usage"]["input_tokens"]
    assert streamed.usage.output_tokens == reply["usage"]["output_tokens"]
    assert [(c.id, c.name, c.arguments) for c in streamed.message.tool_calls] == [
        (item["call_id"], item["name"], item["arguments"])
        for item in reply["output"]
        if item["type"] == "function_call"
    ]
    texts = [i["content"][0]["text"] for i in reply["output"] if i["type"] == "message"]
    assert "".join(pieces) == streamed.message.content == "".join(texts)
    assert len(pieces) == (4 if texts else 0)  # the wire server sends a text in four pieces
    unstreamed, asked = (request.body for request in wire.requests)
    assert "stream" not in unstreamed and asked["stream"] is True
    assert {k: v for k, v in asked.items() if k != "stream"} == unstreamed


async def test_the_wire_servers_events_are_the_responses_apis() -> None:
    body = responses_function_calls(CALLS[:1], text="Hi.", reasoning="enc-1", model="m")
    events = responses_events(body)

    kinds = [event["type"] for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and events[-1]["response"] == body
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == body["output"]  # each item closed whole, in order
    assert kinds.count("response.output_text.delta") == 3  # "Hi." in pieces of one
    assert "response.function_call_arguments.done" in kinds


async def test_a_refused_streamed_call_fails_as_an_unstreamed_one(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    wire.enqueue(error(429, "slow down", {"retry-after": "3"}))

    async def on_text(text: str) -> None:
        raise AssertionError("no text comes from a refusal")

    with pytest.raises(ProviderError) as caught:
        await provider.answer(ModelRequest("gpt-test", "", HELLO, [], on_text=on_text))

    assert (caught.value.status, caught.value.retry_after) == (429, 3.0)
    assert caught.value.retryable and "slow down" in str(caught.value)


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (broken_off(6, responses_text(SUNNY)), "Connection lost."),
        (error_event(6, 500, "boom", responses_text(SUNNY)), "boom"),
    ],
    ids=["broken-off", "error-event"],
)
async def test_a_stream_that_fails_part_way_fails_the_call_as_one_that_got_no_answer(
    wire: WireServer, provider: OpenAIResponsesProvider, fault: BrokenStream, said: str
) -> None:
    # created, in_progress, the message's item and content part opened, two pieces of its text
    wire.enqueue(fault)
    pieces = Pieces()
    with pytest.raises(ProviderError) as caught:
        await provider.answer(ModelRequest("gpt-test", "", HELLO, [], on_text=pieces))

    assert caught.value.status is None and caught.value.retryable
    assert said in str(caught.value) and "/v1/responses" in str(caught.value)
    assert len(pieces) == 2 and SUNNY.startswith("".join(pieces))
