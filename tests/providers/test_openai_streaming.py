"""OpenAIProvider streaming through the real SDK client, against the local wire server's
streamed chunks: the text reaches `on_text` piece by piece, in order, and the reply is the one
the same answer gives unstreamed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.providers.adapters import (
    adapter_fixture,
    answered_both_ways,
)
from waitstate.providers.openai import OpenAIProvider
from waitstate.testing.wire_server import (
    WireServer,
    openai_chunks,
    openai_text,
    openai_tool_calls,
)

CALLS = [("call_1", "lookup", '{"city": "Paris"}'), ("call_2", "lookup", '{"city": ')]


def _text_and_calls() -> dict[str, Any]:
    body = openai_tool_calls(CALLS, input_tokens=31, output_tokens=17)
    body["choices"][0]["message"]["content"] = "Looking both up."
    return body


provider = adapter_fixture("openai", OpenAIProvider)


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
    both = await answered_both_ways(wire, provider, "gpt-test", reply)

    message = reply["choices"][0]["message"]
    both.assert_alike(
        (reply["usage"]["prompt_tokens"], reply["usage"]["completion_tokens"]),
        [
            (c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls") or []
        ],
        message["content"] or "",
    )
    both.assert_asked_alike(stream=True, stream_options={"include_usage": True})


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
