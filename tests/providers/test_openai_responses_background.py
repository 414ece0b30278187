"""OpenAIResponsesProvider's background responses (`<model>?background`) through the real SDK
client, against the local wire server: created `queued` and returned as their id, asked for
until they are given, cancelled; the reply as a foreground call gives it."""

from __future__ import annotations

import asyncio

import pytest

from tests.providers.adapters import HELLO, LOOKUP, adapter_fixture
from waitstate.providers import ProviderError, UnknownModelError
from waitstate.providers.base import ModelRequest, ResponseFailed
from waitstate.providers.openai_responses import OpenAIResponsesProvider
from waitstate.schemas import ModelResponse
from waitstate.testing.wire_server import WireServer, responses_text

BACKGROUND = "gpt-test?background"


provider = adapter_fixture("openai-responses", OpenAIResponsesProvider)


def _calls(wire: WireServer) -> list[str]:
    """The requests as `METHOD path` without the query, oldest first."""
    return [f"{r.method} {r.path.partition('?')[0]}" for r in wire.requests]


async def _given(provider: OpenAIResponsesProvider, response_id: str) -> ModelResponse:
    for _ in range(100):
        reply = await provider.poll(response_id, BACKGROUND)
        if reply is not None:
            return reply
        await asyncio.sleep(0.05)
    raise AssertionError(f"{response_id} was never given")


async def test_a_background_call_returns_its_id_then_its_reply_when_given(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    wire.background.seconds = 0.3
    wire.enqueue(responses_text("Paris.", reasoning="enc-1", input_tokens=40, cached_tokens=32))

    pending = await provider.answer(ModelRequest(BACKGROUND, "Be brief.", HELLO, [LOOKUP]))
    assert pending.background_id is not None and pending.background_id.startswith("resp_")
    assert pending.stop_reason == "queued"
    assert pending.message.content == "" and pending.usage.model_calls == 0
    first = await provider.poll(pending.background_id, BACKGROUND)
    reply = await _given(provider, pending.background_id)

    create = wire.requests[0].body
    # Background responses are stored by OpenAI (it requires it), to be retrieved by their id.
    assert (create["background"], create["store"]) == (True, True)
    assert create["model"] == "gpt-test", "the option is ours, not the model's name"
    assert create["include"] == ["reasoning.encrypted_content"]
    assert "stream" not in create
    assert first is None, "in progress: no reply yet"
    calls = _calls(wire)
    assert calls[0] == "POST /v1/responses"
    assert set(calls[1:]) == {f"GET /v1/responses/{pending.background_id}"}
    assert "reasoning.encrypted_content" in wire.requests[-1].path
    # The reply a foreground call gives: its text, usage with the cache, its reasoning kept
    # under the model's own name (shared with foreground calls of the model).
    assert reply.background_id is None
    assert reply.message.content == "Paris."
    assert (reply.usage.model_calls, reply.usage.input_tokens) == (1, 40)
    assert reply.usage.cached_input_tokens == 32
    items = reply.message.provider_items
    assert items is not None and items.model == "gpt-test"
    assert items.items[0]["encrypted_content"] == "enc-1"
    assert reply.stop_reason == "completed"


async def test_a_response_given_at_once_is_the_reply(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    wire.background.seconds = 0
    wire.enqueue(responses_text("At once."))

    reply = await provider.answer(ModelRequest(BACKGROUND, "", HELLO, []))

    assert reply.background_id is None and reply.message.content == "At once."
    assert _calls(wire) == ["POST /v1/responses"]


async def test_a_cancelled_response_stops_and_is_no_reply(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    wire.background.seconds = 60
    pending = await provider.answer(ModelRequest(BACKGROUND, "", HELLO, []))
    assert pending.background_id is not None

    await provider.cancel(pending.background_id)
    with pytest.raises(ResponseFailed) as failed:
        await provider.poll(pending.background_id, BACKGROUND)

    assert _calls(wire)[1] == f"POST /v1/responses/{pending.background_id}/cancel"
    assert failed.value.status == "cancelled"
    assert f"background response {pending.background_id} cancelled" in str(failed.value)


async def test_an_unknown_response_is_a_refusal(provider: OpenAIResponsesProvider) -> None:
    with pytest.raises(ProviderError) as refused:
        await provider.poll("resp_nope", BACKGROUND)

    assert refused.value.status == 404 and not refused.value.retryable


async def test_an_unknown_option_is_a_bad_spec(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    with pytest.raises(UnknownModelError, match="unknown option 'fast'"):
        await provider.answer(ModelRequest("gpt-test?fast", "", HELLO, []))

    assert wire.requests == []


async def test_a_foreground_call_is_as_before(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    reply = await provider.answer(ModelRequest("gpt-test", "", HELLO, []))

    body = wire.requests[0].body
    assert body["store"] is False and "background" not in body
    assert reply.background_id is None and reply.message.content == "ok"
