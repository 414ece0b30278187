"""OpenAIResponsesProvider streaming through the real SDK client, against the local wire
server's Responses events: the text reaches `on_text` piece by piece, in order, and the reply
is the one the same answer gives unstreamed, reasoning items included."""

from __future__ import annotations

from typing import Any

import pytest

from tests.providers.adapters import (
    adapter_fixture,
    answered_both_ways,
)
from waitstate.providers.openai_responses import OpenAIResponsesProvider
from waitstate.testing.wire_server import (
    WireServer,
    responses_events,
    responses_function_calls,
    responses_text,
)

CALLS = [("call_1", "lookup", '{"city": "Paris"}'), ("call_2", "lookup", '{"city": ')]
SUNNY = "The weather in Paris is sunny."


provider = adapter_fixture("openai-responses", OpenAIResponsesProvider)


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
    both = await answered_both_ways(wire, provider, "gpt-test", reply)

    both.assert_alike(
        (reply["usage"]["input_tokens"], reply["usage"]["output_tokens"]),
        [
            (item["call_id"], item["name"], item["arguments"])
            for item in reply["output"]
            if item["type"] == "function_call"
        ],
        "".join(i["content"][0]["text"] for i in reply["output"] if i["type"] == "message"),
    )
    both.assert_asked_alike(stream=True)


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
