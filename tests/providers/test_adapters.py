"""What the OpenAI and Anthropic adapters do alike (the Responses adapter too, where named),
through each real SDK client against the local wire server (what each protocol's request and answer become: test_openai.py and
test_anthropic.py; failures: test_errors.py)."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import AsyncGeneratorType
from typing import Any

import pytest

from tests.helpers import eventually
from tests.providers.adapters import HELLO, LOOKUP, PROVIDERS, SDK_PROVIDERS, Pieces, connected
from waitstate.providers.base import Adapter, ModelRequest
from waitstate.schemas import Message, ToolCall
from waitstate.testing.wire_server import (
    WireServer,
    anthropic_text,
    anthropic_tool_use,
    openai_text,
    openai_tool_calls,
    responses_text,
)


@pytest.mark.parametrize(
    ("name", "text", "stop_reason"),
    [("openai", openai_text, "stop"), ("anthropic", anthropic_text, "end_turn")],
)
async def test_text_answer_with_usage(
    wire: WireServer, name: str, text: Callable[..., dict[str, Any]], stop_reason: str
) -> None:
    wire.enqueue(text("Paris.", input_tokens=12, output_tokens=3, model="test-model-0001"))

    async with connected(name, wire.url) as provider:
        response = await provider.complete("test-model", "Be brief.", HELLO, [])

    assert response.message == Message(role="assistant", content="Paris.")
    assert (response.usage.model_calls, response.usage.input_tokens) == (1, 12)
    assert response.usage.output_tokens == 3
    assert response.stop_reason == stop_reason
    assert response.model == "test-model-0001"
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    ("name", "reply", "content", "calls", "stop_reason"),
    [
        (
            "openai",
            openai_tool_calls(
                [("call_1", "lookup", '{"city": "Paris"}'), ("call_2", "lookup", '{"city": ')]
            ),
            "",
            [
                ToolCall(id="call_1", name="lookup", arguments='{"city": "Paris"}'),
                # Malformed JSON is kept, not repaired or dropped.
                ToolCall(id="call_2", name="lookup", arguments='{"city": '),
            ],
            "tool_calls",
        ),
        (
            "anthropic",
            anthropic_tool_use(
                [("toolu_1", "lookup", {"city": "Paris"}), ("toolu_2", "lookup", {})],
                text="Looking both up.",
            ),
            "Looking both up.",
            [
                ToolCall(id="toolu_1", name="lookup", arguments='{"city": "Paris"}'),
                ToolCall(id="toolu_2", name="lookup", arguments="{}"),
            ],
            "tool_use",
        ),
    ],
    ids=PROVIDERS,
)
async def test_tool_calls_survive(
    wire: WireServer,
    name: str,
    reply: dict[str, Any],
    content: str,
    calls: list[ToolCall],
    stop_reason: str,
) -> None:
    wire.enqueue(reply)

    async with connected(name, wire.url) as provider:
        response = await provider.complete("test-model", "", HELLO, [LOOKUP])

    assert response.message.content == content
    assert response.message.tool_calls == calls
    assert response.stop_reason == stop_reason
    assert response.model == "test-model"


@pytest.mark.parametrize("name", PROVIDERS)
async def test_no_tools_and_no_system_prompt_are_left_out(wire: WireServer, name: str) -> None:
    async with connected(name, wire.url) as provider:
        await provider.complete("test-model", "", HELLO, [])

    body = wire.requests[-1].body
    assert "tools" not in body
    assert "system" not in body
    assert body["messages"] == [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("name", PROVIDERS)
async def test_empty_queue_plays_one_tool_round_trip(wire: WireServer, name: str) -> None:
    async with connected(name, wire.url) as provider:
        first = await provider.complete("test-model", "", HELLO, [LOOKUP])
        [call] = first.message.tool_calls
        result = Message(role="tool", tool_call_id=call.id, name="lookup", content="sunny")

        second = await provider.complete(
            "test-model", "", [*HELLO, first.message, result], [LOOKUP]
        )
        third = await provider.complete("test-model", "", HELLO, [])

    assert (call.name, call.arguments) == ("lookup", "{}")
    assert second.message.content == "Received 1 tool result (lookup)."
    assert third.message.content == "ok"


@dataclass
class AsyncGenerators:
    """The async generators first iterated while recording, and of them, in order, those that
    were finalized (dropped, to be closed by the event loop), as weak references."""

    # By id: weak references to a generator are cleared before it is finalized.
    started: set[int] = field(default_factory=set)
    finalized: list[weakref.ref[AsyncGeneratorType[Any, Any]]] = field(default_factory=list)

    async def closed(self) -> bool:
        """Whether the loop closed every one it was given to close (and so, dropped what they
        held, and was given those to close in turn)."""
        return all((agen := ref()) is None or agen.ag_frame is None for ref in self.finalized)


@contextmanager
def recording_async_generators() -> Iterator[AsyncGenerators]:
    """Records the async generators first iterated in the block, and their finalization
    whenever it comes (the event loop's own hooks still see both)."""
    firstiter, finalizer = sys.get_asyncgen_hooks()
    seen = AsyncGenerators()

    def first(agen: AsyncGenerator[Any, Any]) -> None:
        seen.started.add(id(agen))
        if firstiter is not None:
            firstiter(agen)

    def finalize(agen: AsyncGenerator[Any, Any]) -> None:
        if id(agen) in seen.started:
            assert isinstance(agen, AsyncGeneratorType)
            seen.finalized.append(weakref.ref(agen))
        if finalizer is not None:
            finalizer(agen)

    sys.set_asyncgen_hooks(firstiter=first, finalizer=finalize)
    try:
        yield seen
    finally:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)


STREAMED = {
    "openai": openai_text("Paris."),
    "anthropic": anthropic_text("Paris."),
    "openai-responses": responses_text("Paris.", reasoning="enc-1"),
}


@pytest.mark.parametrize("name", SDK_PROVIDERS)
async def test_a_streamed_answer_leaves_nothing_of_its_stream_to_the_garbage_collector(
    wire: WireServer, name: str
) -> None:
    # An async generator of the stream left suspended in a reference cycle is finalized by the
    # garbage collector, in whatever thread happens to collect (the wire server's, a worker's
    # thread pool), where it can meet the event loop closing it: "async generator already
    # executing" (docs/upstream/async-generator-gc-thread.md). One dropped outside a cycle is
    # finalized at once, in the thread that drops it (the loop's), and closed by the loop.
    wire.enqueue(STREAMED[name])
    pieces = Pieces()
    gc.disable()  # the collection below is the only one: it finds what only a collection can
    try:
        async with connected(name, wire.url) as provider:
            assert isinstance(provider, Adapter)
            with recording_async_generators() as stream:
                response = await provider.answer(
                    ModelRequest("test-model", "", HELLO, [], on_text=pieces)
                )
        await eventually(stream.closed, "the loop to close the stream's dropped generators")
        dropped = len(stream.finalized)
        gc.collect()
        collected = [ref() for ref in stream.finalized[dropped:]]
    finally:
        gc.enable()

    assert response.message.content == "".join(pieces) == "Paris."
    assert stream.started, "the stream was read through async generators"
    left = [agen.ag_code.co_qualname if agen is not None else "?" for agen in collected]
    assert left == [], "left for the garbage collector"
