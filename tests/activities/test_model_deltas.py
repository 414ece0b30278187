"""The model-call activity hands a streamed answer's text to the gateway as it is written
(`DeltaTarget`): in order, in batches, with a publish token for the run, and never at the
cost of the call: a gateway that is down or hangs changes nothing of the reply, nor delays it
more than `DELTA_DRAIN`. Real SDK client over HTTP to the wire server; the gateway is a stand-in
transport."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from waitstate.activities import ModelActivities
from waitstate.activities.deltas import DELTA_DRAIN, DeltaTarget
from waitstate.auth.tokens import ResumeTokens
from waitstate.blobs import LocalBlobStore
from waitstate.schemas import Message, ModelCallInput, ModelResponse
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, anthropic_text, openai_text, responses_text
from waitstate.tools import ToolRegistry
from waitstate.worker import build_providers

TOKENS = ResumeTokens({"k": "k" * 40}, "k")
ANSWER = "Seventeen invoices matched; two await a signature before the quarter closes."
HELLO = ModelCallInput(
    model="openai:test-model",
    new_messages=[Message(role="user", content="hello")],
    tools=[],
)
Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


async def _call(
    wire: WireServer, blob_dir: Path, gateway: Handler, call: ModelCallInput = HELLO
) -> ModelResponse:
    providers = build_providers(
        Settings(
            openai_base_url=wire.openai_base_url,
            openai_api_key="test-key",
            anthropic_base_url=wire.anthropic_base_url,
            anthropic_api_key="test-key",
        )
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(gateway)) as http:
        activities = ModelActivities(
            providers,
            ToolRegistry([]),
            LocalBlobStore(blob_dir),
            deltas=DeltaTarget(http, TOKENS, "http://gateway.test/"),
        )
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, start_to_close_timeout=timedelta(seconds=30))
        try:
            return await env.run(activities.call_model, call)
        finally:
            await providers.aclose()


@pytest.mark.parametrize(
    ("provider", "reply"),
    [
        ("openai", openai_text(ANSWER)),
        ("openai-responses", responses_text(ANSWER, reasoning="enc")),
        ("anthropic", anthropic_text(ANSWER)),
    ],
    ids=["openai", "openai-responses", "anthropic"],
)
async def test_the_answers_text_goes_to_the_gateway_in_order_with_a_publish_token(
    wire: WireServer, tmp_path: Path, provider: str, reply: dict[str, Any]
) -> None:
    wire.enqueue(reply)
    posts: list[httpx.Request] = []

    async def gateway(request: httpx.Request) -> httpx.Response:
        posts.append(request)
        return httpx.Response(202)

    call = HELLO.model_copy(update={"model": f"{provider}:test-model"})
    response = await _call(wire, tmp_path, gateway, call)

    assert response.message.content == ANSWER
    bodies = [json.loads(post.content) for post in posts]
    assert posts and "".join(body["text"] for body in bodies) == ANSWER
    assert {(body["turn"], body["call"]) for body in bodies} == {(None, "test.1")}
    for post in posts:
        assert post.method == "POST"
        assert str(post.url) == "http://gateway.test/v1/runs/test/deltas"
        token = post.headers["authorization"].removeprefix("Bearer ")
        assert TOKENS.verify_publish(token).run_id == "test"
    assert wire.requests[-1].body["stream"] is True


async def test_a_gateway_that_is_down_or_hangs_costs_the_call_nothing(
    wire: WireServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hung: list[str] = []  # what became of each post to the gateway that hangs

    async def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def hangs(request: httpx.Request) -> httpx.Response:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            hung.append("given up")
            raise
        hung.append("answered")
        return httpx.Response(202)

    async def refuses(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401)

    responses = []
    for gateway in (down, hangs, refuses):
        wire.enqueue(openai_text(ANSWER, output_tokens=7))
        with caplog.at_level(logging.WARNING):
            responses.append(await _call(wire, tmp_path, gateway))

    for response in responses:
        assert response.message.content == ANSWER
        assert response.usage.output_tokens == 7
    # The hanging post was given up when the answer had waited DELTA_DRAIN for it (the call
    # returned without its answer), each gateway's text dropped, saying why.
    assert hung == ["given up"]
    dropped = [r.args for r in caplog.records if "is not streamed" in str(r.msg)]
    assert [why for _, why in dropped] == [
        "ConnectError",
        f"no answer within {DELTA_DRAIN:g} s",
        "HTTP 401",
    ]
