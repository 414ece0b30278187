"""The model-call activity hands a streamed answer's text to the gateway as it is written
(`DeltaTarget`): in order, in batches, with a publish token for the run, and never at the
cost of the call: a gateway that is down or hangs changes nothing of the reply, nor delays it
more than `DELTA_DRAIN`. Real SDK client over HTTP to the wire server; the gateway is a stand-in
transport."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from activities import ModelActivities
from activities.model import DELTA_DRAIN, DeltaTarget
from waitstate.blobs import LocalBlobStore
from waitstate.gateway.tokens import ResumeTokens
from waitstate.schemas import Message, ModelCallInput, ModelResponse
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, anthropic_text, openai_text, responses_text
from waitstate.tools import ToolRegistry
from worker import build_providers

TOKENS = ResumeTokens({"k": "k" * 40}, "k")
ANSWER = "Seventeen invoices matched; two await a signature before the quarter closes."
HELLO = ModelCallInput(
    model="openai:test-model",
    new_messages=[Message(role="user", content="hello")],
    tools=[],
    turn=3,
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
    assert {(body["turn"], body["call"]) for body in bodies} == {(3, "test.1")}
    for post in posts:
        assert post.method == "POST"
        assert str(post.url) == "http://gateway.test/v1/runs/test/deltas"
        token = post.headers["authorization"].removeprefix("Bearer ")
        assert TOKENS.verify_publish(token).run_id == "test"
    assert wire.requests[-1].body["stream"] is True


async def test_a_gateway_that_is_down_or_hangs_costs_the_call_nothing(
    wire: WireServer, tmp_path: Path
) -> None:
    async def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def hangs(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(202)

    async def refuses(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401)

    for gateway in (down, hangs, refuses):
        wire.enqueue(openai_text(ANSWER, output_tokens=7))
        began = time.monotonic()
        response = await _call(wire, tmp_path, gateway)
        took = time.monotonic() - began

        assert response.message.content == ANSWER, gateway.__name__
        assert response.usage.output_tokens == 7, gateway.__name__
        assert took < DELTA_DRAIN + 2, gateway.__name__
