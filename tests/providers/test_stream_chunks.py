"""A streamed answer calls `ModelRequest.on_chunk` at every event of its stream, text or not
(what the model activity heartbeats on): an answer that is all tool call, whose text hook is
never called, is seen alive all the same. Real SDK clients over HTTP to the wire server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.providers.adapters import HELLO, LOOKUP, SDK_PROVIDERS, Pieces, connected
from waitstate.providers.base import Adapter, ModelRequest
from waitstate.testing.wire_responses import responses_events, responses_function_calls
from waitstate.testing.wire_server import (
    WireServer,
    anthropic_events,
    anthropic_tool_use,
    openai_chunks,
    openai_tool_calls,
)

CALL = ("call_1", "lookup", '{"city": "Paris"}')


def _answer(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The protocol's answer that only calls a tool, and the events its stream is sent as."""
    if name == "openai":
        body = openai_tool_calls([CALL])
        return body, openai_chunks(body, include_usage=True)  # the adapter asks for usage
    if name == "anthropic":
        body = anthropic_tool_use([("call_1", "lookup", {"city": "Paris"})])
        return body, anthropic_events(body)
    body = responses_function_calls([CALL])
    return body, responses_events(body)


class Chunks:
    """Counts the calls of `on_chunk`."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@pytest.mark.parametrize("name", SDK_PROVIDERS)
async def test_every_event_of_a_streamed_answer_is_a_chunk_text_or_not(
    wire: WireServer, name: str
) -> None:
    body, events = _answer(name)
    wire.enqueue(body)
    pieces, chunks = Pieces(), Chunks()
    async with connected(name, wire.url) as provider:
        assert isinstance(provider, Adapter)
        response = await provider.answer(
            ModelRequest("test-model", "", HELLO, [LOOKUP], on_text=pieces, on_chunk=chunks)
        )

    assert [call.name for call in response.message.tool_calls] == ["lookup"]
    assert pieces == []  # no text: the text hook alone would never have been called
    # Every event the SDK hands on; Anthropic's keep-alive `ping` it may keep to itself.
    told = [event for event in events if event.get("type") != "ping"]
    assert len(told) <= chunks.count <= len(events)
