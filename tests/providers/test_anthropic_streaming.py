"""AnthropicProvider streaming through the real SDK client, against the local wire server's
streamed events: the text reaches `on_text` piece by piece, in order, the reply is the one the
same answer gives unstreamed, and a stream that fails part-way fails the call as one that got
no answer (another attempt may succeed)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import pytest

from tests.providers.adapters import (
    HELLO,
    LOOKUP,
    Pieces,
    adapter_fixture,
    answered_both_ways,
)
from waitstate.providers.anthropic import AnthropicProvider
from waitstate.providers.base import ModelRequest, ProviderError
from waitstate.testing.wire_server import (
    WireServer,
    anthropic_events,
    anthropic_text,
    anthropic_tool_use,
)

CALLS = [("toolu_1", "lookup", {"city": "Paris"}), ("toolu_2", "lookup", {})]
TEXT = "The weather in Paris is sunny, in Oslo it snows."


provider = adapter_fixture("anthropic", AnthropicProvider)


@pytest.mark.parametrize(
    "reply",
    [
        anthropic_text(TEXT, input_tokens=12),
        anthropic_tool_use(CALLS, output_tokens=9),
        anthropic_tool_use(CALLS, text="Looking both up.", input_tokens=31, output_tokens=17),
        # Its thinking comes as thinking and signature deltas, kept as the unstreamed one's.
        anthropic_tool_use(
            CALLS, text="Both, now.", thinking="Two lookups.", redacted_thinking="x"
        ),
    ],
    ids=["text", "tool-calls", "text-and-tool-calls", "thinking-and-tool-calls"],
)
async def test_a_streamed_answer_is_the_unstreamed_one_and_its_text_comes_in_order(
    wire: WireServer, provider: AnthropicProvider, reply: dict[str, Any]
) -> None:
    both = await answered_both_ways(wire, provider, "claude-test", reply)

    blocks = reply["content"]
    both.assert_alike(
        (reply["usage"]["input_tokens"], reply["usage"]["output_tokens"]),
        [(b["id"], b["name"], json.dumps(b["input"])) for b in blocks if b["type"] == "tool_use"],
        "".join(b["text"] for b in blocks if b["type"] == "text"),
    )
    assert both.streamed.stop_reason == reply["stop_reason"]
    both.assert_asked_alike(stream=True)


async def test_the_wire_servers_events_are_anthropics(wire: WireServer) -> None:
    reply = anthropic_tool_use(CALLS, text="Looking both up.", input_tokens=31, output_tokens=17)
    events = anthropic_events({**reply, "model": "claude-test"})

    assert [event["type"] for event in events] == [
        "message_start",
        *["content_block_start", "ping", *["content_block_delta"] * 4, "content_block_stop"],
        *["content_block_start", *["content_block_delta"] * 5, "content_block_stop"],
        *["content_block_start", "content_block_delta", "content_block_stop"],
        "message_delta",
        "message_stop",
    ]
    assert events[0]["message"]["content"] == [] and events[0]["message"]["stop_reason"] is None
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[-2]["usage"] == {"output_tokens": 17}
    # The SDK's own accumulation of them makes the message the unstreamed call answers.
    plain, streamed = await _plain_and_streamed(wire, reply)

    assert streamed.model_dump(exclude={"id"}) == plain.model_dump(exclude={"id"})


async def test_the_wire_servers_thinking_events_are_anthropics(wire: WireServer) -> None:
    reply = anthropic_text("Sunny.", thinking="Paris is in France.", redacted_thinking="hidden")
    events = anthropic_events({**reply, "model": "claude-test"})

    thinking, redacted = reply["content"][:2]
    assert [e["type"] for e in events[1:9]] == [
        *["content_block_start", "ping", *["content_block_delta"] * 5, "content_block_stop"],
    ]
    assert events[1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [e["delta"] for e in events[3:8]]
    assert [d["type"] for d in deltas] == ["thinking_delta"] * 4 + ["signature_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == thinking["thinking"]
    assert deltas[-1]["signature"] == thinking["signature"]
    # A redacted block comes whole.
    assert [e["type"] for e in events[9:11]] == ["content_block_start", "content_block_stop"]
    assert events[9]["content_block"] == redacted
    # The SDK's own accumulation of them makes the message the unstreamed call answers.
    plain, streamed = await _plain_and_streamed(wire, reply)

    assert streamed.model_dump(exclude={"id"}) == plain.model_dump(exclude={"id"})
    assert [block.type for block in streamed.content] == ["thinking", "redacted_thinking", "text"]


async def test_a_streamed_tool_input_that_is_not_a_json_object_is_an_empty_one(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    reply = anthropic_tool_use(CALLS)
    # A string input is streamed as written: here, JSON cut short, and JSON but no object.
    reply["content"][0]["input"] = '{"city": '
    reply["content"][1]["input"] = '["Paris"]'
    wire.enqueue(reply)

    streamed = await provider.answer(
        ModelRequest("claude-test", "", HELLO, [LOOKUP], on_text=Pieces())
    )

    assert [(c.id, c.arguments) for c in streamed.message.tool_calls] == [
        ("toolu_1", "{}"),
        ("toolu_2", "{}"),
    ]


async def test_a_stream_that_ends_before_its_message_does_is_no_answer() -> None:
    # A clean end without `message_stop` (a proxy cutting the answer short, say): the wire
    # server only breaks streams off, so this one is played on the SDK's own transport.
    events = anthropic_events({**anthropic_text(TEXT), "model": "claude-test"})[:-1]
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)

    async def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    pieces = Pieces()
    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as http,
        anthropic.AsyncAnthropic(
            api_key="test", base_url="http://claude.test", max_retries=0, http_client=http
        ) as client,
    ):
        provider = AnthropicProvider(client)
        with pytest.raises(ProviderError) as caught:
            await provider.answer(ModelRequest("claude-test", "", HELLO, [], on_text=pieces))

    assert caught.value.status is None and caught.value.retryable
    assert "ended before the message did" in str(caught.value)
    assert "".join(pieces) == TEXT


async def _plain_and_streamed(wire: WireServer, reply: dict[str, Any]) -> tuple[Any, Any]:
    """`reply` as the SDK reads it unstreamed, and as its stream accumulates it."""
    wire.enqueue(reply, reply)
    async with anthropic.AsyncAnthropic(
        api_key="test", base_url=wire.anthropic_base_url, max_retries=0
    ) as client:
        plain = await client.messages.create(model="claude-test", max_tokens=64, messages=[])
        async with client.messages.stream(
            model="claude-test", max_tokens=64, messages=[]
        ) as stream:
            return plain, await stream.get_final_message()
