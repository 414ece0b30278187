"""The wire server's simulated prompt caches, through the real SDK clients and our adapters: a
conversation's later calls read the prefix the earlier ones left (Anthropic: at its
breakpoints; OpenAI: any prefix seen, within its prompt_cache_key), and the usage says so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.providers.adapters import LOOKUP, connected
from waitstate.providers.base import Adapter, ModelRequest
from waitstate.schemas import Message, ToolCall, Usage
from waitstate.testing.wire_server import WireServer

SYSTEM = "You answer questions about the weather. " * 40
PROTOCOLS = ["openai", "openai-responses", "anthropic"]


@pytest.fixture
def caching() -> Iterator[WireServer]:
    with WireServer(prompt_cache=True) as server:
        yield server


def _turns(n: int) -> list[Message]:
    """A conversation after `n` rounds of one tool call, ending with the tool's result."""
    messages = [Message(role="user", content="Weather in Paris, then Oslo, then Rome?")]
    for i in range(n):
        call = ToolCall(id=f"call_{i}", name="lookup", arguments=f'{{"city": "c{i}"}}')
        messages += [
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id=call.id, name="lookup", content=f"sunny {i}" * 20),
        ]
    return messages


async def _ignore(_: str) -> None:
    return None


async def _conversation(server: WireServer, name: str, *, streamed: bool = False) -> list[Usage]:
    """The usage of three calls of one conversation, each the last one's prefix and more."""
    used = []
    on_text = _ignore if streamed else None
    async with connected(name, server.url) as provider:
        assert isinstance(provider, Adapter)
        for n in range(3):
            request = ModelRequest(
                "m", SYSTEM, _turns(n), [LOOKUP], on_text=on_text, cache_key="run-1"
            )
            used.append((await provider.answer(request)).usage)
    return used


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", PROTOCOLS)
async def test_later_calls_read_the_prefix_the_earlier_ones_left(
    caching: WireServer, name: str, streamed: bool
) -> None:
    first, second, third = await _conversation(caching, name, streamed=streamed)

    assert first.cached_input_tokens == 0
    assert 0 < second.cached_input_tokens < second.input_tokens
    assert second.input_tokens < third.input_tokens
    # The whole of the previous call's prompt: each call is the next one's prefix.
    assert third.cached_input_tokens == second.input_tokens
    if name == "anthropic":
        # Written once, at the breakpoints, and read back from then on.
        assert first.cache_write_input_tokens == first.input_tokens
        assert second.cache_write_input_tokens == second.input_tokens - first.input_tokens
    else:
        assert second.cached_input_tokens == first.input_tokens


async def test_without_breakpoints_anthropic_caches_nothing(caching: WireServer) -> None:
    async with connected("anthropic", caching.url) as provider:
        assert isinstance(provider, Adapter)
        provider._prompt_cache = False  # type: ignore[attr-defined]
        used = [
            (await provider.answer(ModelRequest("m", SYSTEM, _turns(n), [LOOKUP]))).usage
            for n in range(3)
        ]

    assert [(u.cached_input_tokens, u.cache_write_input_tokens) for u in used] == [(0, 0)] * 3


@pytest.mark.parametrize("name", ["openai", "openai-responses"])
async def test_openai_keeps_a_prefix_within_its_cache_key(caching: WireServer, name: str) -> None:
    cached = []
    async with connected(name, caching.url) as provider:
        assert isinstance(provider, Adapter)
        for key in ("run-1", "run-2", "run-1"):
            request = ModelRequest("m", SYSTEM, _turns(1), [LOOKUP], cache_key=key)
            cached.append((await provider.answer(request)).usage.cached_input_tokens)

    first, other_key, again = cached
    assert (first, other_key) == (0, 0)
    assert again > 0


async def test_prefixes_under_the_minimum_are_not_cached() -> None:
    with WireServer(prompt_cache=True, cache_min_tokens=100_000) as server:
        used = await _conversation(server, "anthropic")

    assert [(u.cached_input_tokens, u.cache_write_input_tokens) for u in used] == [(0, 0)] * 3


async def test_the_counts_are_estimated_from_the_request() -> None:
    with WireServer(prompt_cache=True) as one, WireServer(prompt_cache=True) as other:
        first = await _conversation(one, "openai")
        again = await _conversation(other, "openai")

    # Deterministic: the same requests count the same, whatever the scripted replies said.
    assert first == again and first[0].input_tokens > len(SYSTEM) // 4
