"""How a provider call fails, alike for OpenAI (both APIs) and Anthropic: through each real SDK client (no
retries of its own), against the local wire server or a port where nothing listens. Each
failure is one `ProviderError` that names the provider, says whether another attempt could
succeed, and keeps the provider's retry hint."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.providers.adapters import HELLO, SDK_PROVIDERS, Pieces, connected
from waitstate.providers.base import MESSAGE_CHARS, ModelRequest, Provider, ProviderError
from waitstate.testing.wire_server import (
    WireServer,
    anthropic_text,
    broken_off,
    delayed,
    error,
    error_event,
    openai_text,
    responses_text,
)

# The SDKs' own errors for a call that got no answer (`ProviderError`'s cause), by kind: the
# connection failed, or the answer did not come in time (a kind of the first).
CONNECTION_ERRORS = (openai.APIConnectionError, anthropic.APIConnectionError)
TIMEOUTS = (openai.APITimeoutError, anthropic.APITimeoutError)
SUNNY = "The weather in Paris is sunny."
# Per adapter: the path it posts to, a reply with SUNNY as its text, and how many events its
# stream of that reply sends before two pieces of the text have gone (the openai role's chunk;
# Responses' created, in_progress, item and content part opened; Anthropic's message_start,
# content_block_start and ping).
STREAMS = {
    "openai": ("/v1/chat/completions", openai_text(SUNNY), 3),
    "openai-responses": ("/v1/responses", responses_text(SUNNY), 6),
    "anthropic": ("/v1/messages", anthropic_text(SUNNY), 5),
}


async def _failure(provider: Provider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.complete("test-model", "", HELLO, [])
    return caught.value


@pytest.mark.parametrize("name", SDK_PROVIDERS)
@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (422, False),
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (503, True),
        (529, True),  # Anthropic's "overloaded"
    ],
)
async def test_an_error_status_is_retryable_only_if_another_attempt_could_succeed(
    wire: WireServer, name: str, status: int, retryable: bool
) -> None:
    wire.enqueue(error(status, "The model `test-model` does not exist"))

    async with connected(name, wire.url) as provider:
        failure = await _failure(provider)

    assert (failure.provider, failure.status, failure.retryable) == (name, status, retryable)
    assert failure.retry_after is None
    assert str(failure) == f"{name}: HTTP {status}: The model `test-model` does not exist"
    # max_retries=0: the SDK made no attempt of its own after the failure.
    assert len(wire.requests) == 1


@pytest.mark.parametrize("name", SDK_PROVIDERS)
@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [({"retry-after": "3"}, 3.0), ({"retry-after-ms": "1500"}, 1.5), ({}, None)],
    ids=["seconds", "milliseconds", "none"],
)
async def test_a_rate_limit_keeps_the_providers_retry_hint(
    wire: WireServer, name: str, headers: dict[str, str], retry_after: float | None
) -> None:
    wire.enqueue(error(429, "Rate limit reached", headers))

    async with connected(name, wire.url) as provider:
        failure = await _failure(provider)

    assert (failure.status, failure.retryable, failure.retry_after) == (429, True, retry_after)
    assert str(failure) == f"{name}: HTTP 429: Rate limit reached"
    assert len(wire.requests) == 1


@pytest.mark.parametrize("name", SDK_PROVIDERS)
async def test_a_long_explanation_is_kept_to_one_short_line(wire: WireServer, name: str) -> None:
    wire.enqueue(error(502, "<html>\n" + "<p>Bad gateway</p>\n" * 2000 + "</html>"))

    async with connected(name, wire.url) as provider:
        failure = await _failure(provider)

    prefix = f"{name}: HTTP 502: "
    assert str(failure).startswith(f"{prefix}<html> <p>Bad gateway</p> <p>Bad")
    assert "\n" not in str(failure) and str(failure).endswith("…")
    assert len(str(failure)) == len(prefix) + MESSAGE_CHARS


@pytest.mark.parametrize("name", SDK_PROVIDERS)
async def test_an_unreachable_server_is_retryable_and_named(closed_port: int, name: str) -> None:
    root = f"http://127.0.0.1:{closed_port}"

    async with connected(name, root) as provider:
        failure = await _failure(provider)

    assert (failure.status, failure.retryable, failure.retry_after) == (None, True, None)
    sdk = failure.__cause__
    assert isinstance(sdk, CONNECTION_ERRORS) and not isinstance(sdk, TIMEOUTS)
    # The SDK's message (its words), then the transport's reason and the address tried, which
    # the SDK's message may leave out.
    reason = str(sdk.__cause__).strip()
    assert reason
    assert str(failure).startswith(f"{name}: no response: {sdk.message} {reason} ({root}/v1/")


@pytest.mark.parametrize("name", SDK_PROVIDERS)
async def test_a_server_that_does_not_answer_in_time_is_retryable(
    wire: WireServer, name: str
) -> None:
    wire.enqueue(delayed(5))

    async with connected(name, wire.url, read_within=0.5) as provider:
        failure = await _failure(provider)

    assert (failure.status, failure.retryable) == (None, True)
    # The SDK's timeout, in its words, and the address tried.
    sdk = failure.__cause__
    assert isinstance(sdk, TIMEOUTS)
    assert str(failure).startswith(f"{name}: no response: {sdk.message} ")
    assert f"({wire.url}/v1/" in str(failure)
    assert len(wire.requests) == 1


@pytest.mark.parametrize("name", SDK_PROVIDERS)
async def test_a_refused_streamed_call_fails_as_an_unstreamed_one(
    wire: WireServer, name: str
) -> None:
    wire.enqueue(error(429, "slow down", {"retry-after": "3"}))
    pieces = Pieces()

    async with connected(name, wire.url) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.answer(ModelRequest("test-model", "", HELLO, [], on_text=pieces))

    assert (caught.value.status, caught.value.retry_after) == (429, 3.0)
    assert caught.value.retryable and "slow down" in str(caught.value)
    assert pieces == []  # no text comes from a refusal


@pytest.mark.parametrize("name", SDK_PROVIDERS)
@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (lambda events, reply: broken_off(events, reply), "Connection lost."),
        (lambda events, reply: error_event(events, 500, "boom", reply), "boom"),
        (lambda events, reply: error_event(events, 529, "Overloaded", reply), "Overloaded"),
    ],
    ids=["broken-off", "error-event", "overloaded-event"],
)
async def test_a_stream_that_fails_part_way_fails_the_call_as_one_that_got_no_answer(
    wire: WireServer, name: str, fault: Any, said: str
) -> None:
    path, reply, events = STREAMS[name]
    wire.enqueue(fault(events, reply))
    pieces = Pieces()

    async with connected(name, wire.url) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.answer(ModelRequest("test-model", "", HELLO, [], on_text=pieces))

    # Not the stream's own 200, which would make it a refusal never worth another attempt.
    assert caught.value.status is None and caught.value.retryable
    assert said in str(caught.value) and f"{wire.url}{path}" in str(caught.value)
    assert len(pieces) == 2 and SUNNY.startswith("".join(pieces))
