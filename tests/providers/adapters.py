"""The OpenAI (Chat Completions and Responses) and Anthropic adapters as the worker builds them,
on each real SDK client, and what the providers' tests send them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anthropic
import openai
import pytest

from waitstate.providers.anthropic import AnthropicProvider
from waitstate.providers.base import ModelRequest, Provider
from waitstate.providers.openai import OpenAIProvider
from waitstate.providers.openai_responses import OpenAIResponsesProvider
from waitstate.schemas import Message, ModelResponse, ToolCall, ToolDefinition
from waitstate.testing.wire_server import WireServer

P = TypeVar("P", bound=Provider)

PROVIDERS = ["openai", "anthropic"]
# Every adapter over an SDK: what fails alike for all of them (test_errors.py).
SDK_PROVIDERS = [*PROVIDERS, "openai-responses"]
HELLO = [Message(role="user", content="hello")]
LOOKUP = ToolDefinition(
    name="lookup",
    description="Look a city up.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
# What each protocol's request test sends: two rounds of tool calls, the first said without
# text (one call's arguments not even JSON) and the second with text (its call failed), then
# the user's thanks.
CONVERSATION = [
    Message(role="user", content="Weather in Paris and Oslo?"),
    Message(
        role="assistant",
        tool_calls=[
            ToolCall(id="call_1", name="lookup", arguments='{"city": "Paris"}'),
            ToolCall(id="call_2", name="lookup", arguments='{"city": '),
        ],
    ),
    Message(role="tool", tool_call_id="call_1", name="lookup", content="sunny"),
    Message(role="tool", tool_call_id="call_2", name="lookup", content="bad JSON", is_error=True),
    Message(
        role="assistant",
        content="Checking Oslo.",
        tool_calls=[ToolCall(id="call_3", name="lookup", arguments='{"city": "Oslo"}')],
    ),
    Message(
        role="tool", tool_call_id="call_3", name="lookup", content="no such city", is_error=True
    ),
    Message(role="user", content="Thanks."),
]


async def conversation_sent(
    wire: WireServer, provider: Provider, model: str, path: str
) -> dict[str, Any]:
    """The body of the request `provider` sends to `path` for CONVERSATION (system prompt "You
    are terse.", the LOOKUP tool), asking `model`."""
    await provider.complete(model, "You are terse.", CONVERSATION, [LOOKUP])
    request = wire.requests[-1]
    assert request.path == path
    body: dict[str, Any] = request.body
    assert body["model"] == model
    return body


@asynccontextmanager
async def connected(name: str, root: str, read_within: float = 30) -> AsyncIterator[Provider]:
    """The named adapter on its SDK client, for the server at `root` (e.g. the wire server's
    URL), configured as the worker configures it: the SDK never retries. `read_within` is the
    SDK's own request timeout, in seconds."""
    if name.startswith("openai"):
        async with openai.AsyncOpenAI(
            api_key="test", base_url=f"{root}/v1", max_retries=0, timeout=read_within
        ) as client:
            if name == "openai":
                yield OpenAIProvider(client)
            else:
                yield OpenAIResponsesProvider(client)
    else:
        async with anthropic.AsyncAnthropic(
            api_key="test", base_url=root, max_retries=0, timeout=read_within
        ) as client:
            yield AnthropicProvider(client)


@asynccontextmanager
async def uncached_anthropic(base_url: str) -> AsyncIterator[AnthropicProvider]:
    """The Anthropic adapter sending its requests as they are without cache breakpoints (where
    they go: test_anthropic_cache.py), its replies cut at 512 tokens."""
    async with anthropic.AsyncAnthropic(api_key="test", base_url=base_url, max_retries=0) as client:
        yield AnthropicProvider(client, max_tokens=512, prompt_cache=False)


class Pieces(list[str]):
    """What a streaming adapter handed `on_text`, in order (pass it as `on_text`)."""

    async def __call__(self, text: str) -> None:
        self.append(text)


def adapter_fixture(name: str, kind: type[P]) -> Callable[..., AsyncIterator[P]]:
    """A `provider` fixture: the named adapter (of class `kind`) on the wire server."""

    @pytest.fixture
    async def provider(wire: WireServer) -> AsyncIterator[P]:
        async with connected(name, wire.url) as provider:
            assert isinstance(provider, kind)
            yield provider

    return provider


@dataclass
class BothWays:
    """One reply answered unstreamed, then streamed: both answers, the streamed text's pieces,
    and the two requests' bodies."""

    plain: ModelResponse
    streamed: ModelResponse
    pieces: Pieces
    unstreamed: dict[str, Any]
    asked: dict[str, Any]

    def assert_alike(
        self, tokens: tuple[int, int], calls: list[tuple[str, str, str]], text: str
    ) -> None:
        """The streamed answer is the unstreamed one, with the reply's `tokens` (in, out), its
        tool `calls` (id, name, arguments) and its `text`, whose pieces came in order: the four
        the wire server sends a text in (none without text)."""
        assert self.streamed == self.plain
        usage = self.streamed.usage
        assert (usage.input_tokens, usage.output_tokens) == tokens
        assert [(c.id, c.name, c.arguments) for c in self.streamed.message.tool_calls] == calls
        assert "".join(self.pieces) == self.streamed.message.content == text
        assert len(self.pieces) == (4 if text else 0)

    def assert_asked_alike(self, **streaming: Any) -> None:
        """The streamed call asked what the unstreamed one did, and `streaming` besides (the
        stream flag and its options), which the unstreamed one did not send."""
        assert not streaming.keys() & self.unstreamed.keys(), self.unstreamed
        assert {k: v for k, v in self.asked.items() if k not in streaming} == self.unstreamed
        sent = {k: self.asked.get(k) for k in streaming}
        assert json.dumps(sent) == json.dumps(streaming), sent  # as sent: `true`, never `1`


async def answered_both_ways(
    wire: WireServer, provider: Provider, model: str, reply: dict[str, Any]
) -> BothWays:
    """`reply` given by the wire server to one unstreamed and one streamed call of `model`."""
    wire.enqueue(reply, reply)
    plain = await provider.answer(ModelRequest(model, "Be terse.", HELLO, [LOOKUP]))
    pieces = Pieces()
    streamed = await provider.answer(
        ModelRequest(model, "Be terse.", HELLO, [LOOKUP], on_text=pieces)
    )
    unstreamed, asked = (request.body for request in wire.requests)
    return BothWays(plain, streamed, pieces, unstreamed, asked)
