"""AnthropicProvider with extended thinking, through the real SDK client against the local wire
server, which refuses (400) a request with thinking on whose tool round trip does not bring the
thinking it sent back unchanged (`waitstate.testing.wire_thinking`), as Anthropic does: the
thinking and redacted_thinking blocks are kept with their message, sent back in order before
the calls they led to, to the same provider and model only, and bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from tests.providers.adapters import LOOKUP, Pieces, uncached_anthropic
from waitstate.providers.anthropic import MAX_THINKING_CHARS, AnthropicProvider
from waitstate.providers.base import ModelRequest, ModelSettings, ProviderError
from waitstate.providers.openai_responses import _to_input
from waitstate.schemas import Message, ModelResponse
from waitstate.schemas.messages import ProviderItems
from waitstate.testing.wire_server import WireServer, anthropic_text, anthropic_tool_use
from waitstate.testing.wire_thinking import signature

THINK = ModelSettings(thinking_tokens=2048)
ASK = [Message(role="user", content="Weather in Paris?")]
PARIS = ("toolu_1", "lookup", {"city": "Paris"})


@pytest.fixture
async def provider(wire: WireServer) -> AsyncIterator[AnthropicProvider]:
    async with uncached_anthropic(wire.anthropic_base_url) as provider:
        yield provider


def _results(reply: ModelResponse, content: str = "sunny") -> list[Message]:
    """The conversation after `reply`'s calls, each answered with `content`."""
    answers = [
        Message(role="tool", tool_call_id=call.id, name=call.name, content=content)
        for call in reply.message.tool_calls
    ]
    return [*ASK, reply.message, *answers]


async def _ask(
    provider: AnthropicProvider,
    messages: list[Message],
    settings: ModelSettings | None = THINK,
    model: str = "claude-test",
) -> ModelResponse:
    return await provider.answer(ModelRequest(model, "", messages, [LOOKUP], settings))


async def test_thinking_goes_back_unchanged_before_the_calls_it_led_to(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    first = anthropic_tool_use([PARIS], text="Checking.", thinking="Paris: look it up.")
    wire.enqueue(first, anthropic_text("Sunny.", thinking="It is sunny."))

    called = await _ask(provider, ASK)
    answered = await _ask(provider, _results(called))

    asked, back = (request.body for request in wire.requests)
    assert asked["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    # The thinking counts in max_tokens: the answer still gets the provider's 512.
    assert asked["max_tokens"] == 2048 + 512
    thinking, text, call = first["content"]
    assert back["thinking"] == asked["thinking"]
    assert back["messages"][1] == {
        "role": "assistant",
        "content": [
            thinking,  # whole, signature and all, as the server sent it
            text,
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}},
        ],
    }
    assert call["id"] == "toolu_1"
    assert called.message.content == "Checking."
    assert called.message.provider_items is not None
    assert called.message.provider_items.model_dump() == {
        "provider": "anthropic",
        "model": "claude-test",
        "items": [thinking, {"type": "text"}, {"type": "tool_use", "id": "toolu_1"}],
    }
    assert answered.message.content == "Sunny."  # the thinking is no part of the answer


async def test_the_stand_in_refuses_a_round_trip_without_its_thinking_as_anthropic_does(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    wire.enqueue(anthropic_tool_use([PARIS], thinking="Paris: look it up."))
    called = await _ask(provider, ASK)
    assert called.message.provider_items is not None
    async with anthropic.AsyncAnthropic(
        api_key="test", base_url=wire.anthropic_base_url, max_retries=0
    ) as client:
        # What an adapter that dropped the thinking would send.
        call = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
        dropped: list[Any] = [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ]
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model="claude-test",
                max_tokens=4096,
                messages=dropped,
                thinking={"type": "enabled", "budget_tokens": 2048},
            )
    assert "Expected `thinking` or `redacted_thinking`, but found `tool_use`" in str(caught.value)
    assert len(wire.requests) == 2


async def test_thinking_changed_on_its_way_back_is_refused(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    wire.enqueue(anthropic_tool_use([PARIS], thinking="Paris: look it up."))
    called = await _ask(provider, ASK)
    kept = called.message.provider_items
    assert kept is not None
    kept.items[0] = {**kept.items[0], "thinking": "Oslo: look it up."}

    with pytest.raises(ProviderError) as caught:
        await _ask(provider, _results(called))

    assert caught.value.status == 400 and not caught.value.retryable
    assert "Invalid `signature` in `thinking` block" in str(caught.value)


async def test_redacted_thinking_goes_back_in_its_place(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    first = anthropic_tool_use(
        [PARIS, ("toolu_2", "lookup", {"city": "Oslo"})],
        thinking="Two cities.",
        redacted_thinking="[safety-flagged reasoning]",
    )
    wire.enqueue(first)
    called = await _ask(provider, ASK)

    answered = await _ask(provider, _results(called))  # the default rule: no thinking asked

    sent = wire.requests[-1].body["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["thinking", "redacted_thinking", "tool_use", "tool_use"]
    assert sent[:2] == first["content"][:2]
    assert answered.message.content == "Received 2 tool results (lookup, lookup)."


async def test_thinking_between_calls_keeps_its_order(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    # Interleaved thinking (a model that thinks again between two calls).
    first = anthropic_tool_use([PARIS, ("toolu_2", "lookup", {"city": "Oslo"})])
    one, two = first["content"]
    thinking = [
        {"type": "thinking", "thinking": text, "signature": signature(text)}
        for text in ("First Paris.", "Now Oslo.")
    ]
    first["content"] = [thinking[0], one, thinking[1], two]
    wire.enqueue(first)
    called = await _ask(provider, ASK)

    await _ask(provider, _results(called))

    sent = wire.requests[-1].body["messages"][1]["content"]
    assert [(b["type"], b.get("id")) for b in sent] == [
        ("thinking", None),
        ("tool_use", "toolu_1"),
        ("thinking", None),
        ("tool_use", "toolu_2"),
    ]
    assert [sent[0], sent[2]] == thinking


async def test_thinking_goes_to_its_own_provider_and_model_only(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    wire.enqueue(anthropic_tool_use([PARIS], thinking="Paris: look it up."))
    called = await _ask(provider, ASK, model="claude-big")
    conversation = _results(called)

    # A budget's degrade to another Claude model: its blocks are not that model's to read,
    # and the turn's calls without their thinking are taken back without thinking.
    await _ask(provider, conversation, model="claude-small")
    # Nor do the Responses API's items reach Anthropic, or Anthropic's reach it.
    responses = ProviderItems(provider="openai-responses", model="claude-big", items=[{"x": 1}])
    other = called.message.model_copy(update={"provider_items": responses})
    await _ask(provider, [*ASK, other, *conversation[2:]], model="claude-big")

    degraded, crossed = (request.body for request in wire.requests[1:])
    for body in (degraded, crossed):
        assert "thinking" not in body
        assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_use"]
    sent_to_openai = _to_input(conversation, "openai-responses", "claude-big")
    assert [item.get("type") for item in sent_to_openai] == [None, "function_call", "function_call_output"]  # fmt: skip
    assert "Paris: look it up." not in str(sent_to_openai)


async def test_a_call_without_thinking_sends_none_back(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    wire.enqueue(anthropic_tool_use([PARIS], thinking="Paris: look it up."))
    called = await _ask(provider, ASK)

    await _ask(provider, _results(called), settings=None)

    body = wire.requests[-1].body
    assert "thinking" not in body and body["max_tokens"] == 512
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_use"]


async def test_thinking_past_the_cap_is_not_kept_and_the_turn_goes_on_without(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    wire.enqueue(anthropic_tool_use([PARIS], thinking="x" * MAX_THINKING_CHARS))
    called = await _ask(provider, ASK)

    answered = await _ask(provider, _results(called))

    assert called.message.provider_items is None
    body = wire.requests[-1].body
    assert "thinking" not in body  # else the stand-in, as Anthropic, would refuse the call
    assert answered.message.content == "Received 1 tool result (lookup)."
    # The next turn (a new question from the user) thinks again.
    await _ask(provider, [*_results(called), answered.message, *ASK])
    assert wire.requests[-1].body["thinking"]["budget_tokens"] == 2048


async def test_a_thinking_loop_against_an_empty_queue(provider: AnthropicProvider) -> None:
    # The default rule thinks when asked to: a tool round trip the stand-in checks.
    called = await _ask(provider, ASK)
    answered = await _ask(provider, _results(called))

    assert called.message.tool_calls and called.message.provider_items is not None
    assert answered.message.content == "Received 1 tool result (lookup)."


async def test_streamed_thinking_is_kept_as_the_unstreamed(
    wire: WireServer, provider: AnthropicProvider
) -> None:
    reply = anthropic_tool_use(
        [PARIS], text="Checking.", thinking="Paris: look it up.", redacted_thinking="secret"
    )
    wire.enqueue(reply, reply)
    plain = await _ask(provider, ASK)
    pieces = Pieces()

    streamed = await provider.answer(
        ModelRequest("claude-test", "", ASK, [LOOKUP], THINK, on_text=pieces)
    )

    assert streamed == plain
    assert streamed.message.provider_items is not None
    assert streamed.message.provider_items.items[:2] == reply["content"][:2]
    assert "".join(pieces) == "Checking."  # the thinking is not the answer's text
    await provider.answer(
        ModelRequest("claude-test", "", _results(streamed), [LOOKUP], THINK, on_text=Pieces())
    )
    assert wire.requests[-1].body["messages"][1]["content"][:2] == reply["content"][:2]
