"""The wire server's fault helpers: per-model scripts, and replies that answer late or once
the client retries."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.helpers import eventually
from waitstate.testing.wire_server import (
    WireServer,
    broken_off,
    delayed,
    error,
    error_event,
    held,
    openai_text,
)


def _client(server: WireServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="test", base_url=server.openai_base_url, max_retries=0, timeout=30.0
    )


async def _ask(client: openai.AsyncOpenAI, model: str, limit: float = 30.0) -> str | None:
    """Only the request meant to time out gets a short timeout: under a loaded machine
    (CI) the ones meant to answer may take longer than half a second."""
    response = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], timeout=limit
    )
    return response.choices[0].message.content


async def test_each_model_plays_its_own_script_before_the_shared_queue() -> None:
    with WireServer() as server:
        server.enqueue(openai_text("shared"))
        server.enqueue_for("a", openai_text("a-1"), openai_text("a-2"))
        server.enqueue_for("b", error(429, "slow down", {"retry-after": "1"}))
        client = _client(server)
        with pytest.raises(openai.RateLimitError) as raised:
            await _ask(client, "b")
        answers = [await _ask(client, "a"), await _ask(client, "a"), await _ask(client, "a")]
        await client.close()

    assert raised.value.response.headers["retry-after"] == "1"
    # a's own two replies, then the shared one.
    assert answers == ["a-1", "a-2", "shared"]


async def test_a_delayed_reply_outlasts_a_client_timeout_then_the_next_answers() -> None:
    with WireServer() as server:
        server.enqueue_for("slow", delayed(1.0), openai_text("on time"))
        client = _client(server)
        with pytest.raises(openai.APITimeoutError):
            await _ask(client, "slow", limit=0.2)
        answer = await _ask(client, "slow")
        await client.close()

    assert answer == "on time"


def test_a_delayed_reply_sends_its_reply_or_the_default_rule() -> None:
    with WireServer() as server:
        server.enqueue(delayed(0.05, error(500, "boom")), delayed(0.05))
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        first = httpx.post(f"{server.openai_base_url}/chat/completions", json=body)
        second = httpx.post(f"{server.openai_base_url}/chat/completions", json=body)

    assert first.status_code == 500
    assert first.json()["error"]["message"] == "boom"
    assert second.status_code == 200
    assert second.json()["choices"][0]["message"]["content"] == "ok"


def test_requests_are_stamped_when_read_and_before_their_answer() -> None:
    with WireServer() as server:
        server.enqueue(delayed(0.2))
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        httpx.post(f"{server.openai_base_url}/chat/completions", json=body)
        [request] = server.requests

    assert request.answered_at is not None
    assert request.answered_at - request.received_at >= 0.2


async def test_a_held_reply_answers_once_the_models_next_request_arrives() -> None:
    with WireServer() as server:
        server.enqueue_for("slow", held(60.0, openai_text("late")), openai_text("retried"))
        server.enqueue_for("other", openai_text("other"))
        client = _client(server)
        with pytest.raises(openai.APITimeoutError):
            await _ask(client, "slow", limit=0.5)
        # Another model's request does not release it; the same model's next one does.
        other = await _ask(client, "other")
        held_after_other = server.requests[0].answered_at
        retried = await _ask(client, "slow")
        await client.close()

        async def held_answer() -> float | None:
            return server.requests[0].answered_at

        answered_at = await eventually(held_answer, "the held request's answer")
        retry = server.requests[2]

    assert (other, retried) == ("other", "retried")
    assert held_after_other is None
    assert retry.body["model"] == "slow"
    assert answered_at >= retry.received_at


def test_a_held_reply_with_no_next_request_answers_after_its_limit() -> None:
    with WireServer() as server:
        server.enqueue(held(0.05))
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{server.openai_base_url}/chat/completions", json=body)

    assert answer.json()["choices"][0]["message"]["content"] == "ok"


def test_a_broken_stream_asked_for_unstreamed_fails_as_its_fault_says() -> None:
    with WireServer() as server:
        server.enqueue(error_event(2, 529, "Overloaded"), broken_off(2))
        body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        refused = httpx.post(f"{server.url}/v1/messages", json=body)
        with pytest.raises(httpx.RemoteProtocolError):  # no answer at all
            httpx.post(f"{server.url}/v1/messages", json=body)

    assert refused.status_code == 529
    assert refused.json()["error"] == {"type": "overloaded_error", "message": "Overloaded"}
