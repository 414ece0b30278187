"""Prompt caching through the real SDK clients against the local wire server: as each adapter
counts it, streamed and not (`input_tokens` is the whole prompt for every provider, Anthropic's
own leaving cache reads and writes out; of it, what was read from and written to the cache), and
the request's cache key as OpenAI's `prompt_cache_key`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.providers.adapters import HELLO, connected
from waitstate.providers.base import Adapter, ModelRequest
from waitstate.schemas import Usage
from waitstate.testing.wire_server import (
    WireServer,
    anthropic_text,
    openai_text,
    responses_text,
)

REPLIES: dict[str, dict[str, Any]] = {
    # OpenAI's prompt tokens count the cached ones.
    "openai": openai_text("hi", input_tokens=1500, output_tokens=5, cached_tokens=1024),
    "openai-responses": responses_text(
        "hi", input_tokens=1500, output_tokens=5, cached_tokens=1024
    ),
    # Anthropic's input tokens are those after the last breakpoint only.
    "anthropic": anthropic_text(
        "hi", input_tokens=76, output_tokens=5, cache_read_tokens=1024, cache_write_tokens=400
    ),
}
EXPECTED = {
    "openai": Usage(model_calls=1, input_tokens=1500, output_tokens=5, cached_input_tokens=1024),
    "openai-responses": Usage(
        model_calls=1, input_tokens=1500, output_tokens=5, cached_input_tokens=1024
    ),
    "anthropic": Usage(
        model_calls=1,
        input_tokens=1500,
        output_tokens=5,
        cached_input_tokens=1024,
        cache_write_input_tokens=400,
    ),
}


async def _ignore(_: str) -> None:
    return None


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", list(REPLIES))
async def test_cached_input_is_counted_within_the_input(
    wire: WireServer, name: str, streamed: bool
) -> None:
    wire.enqueue(REPLIES[name])

    async with connected(name, wire.url) as provider:
        assert isinstance(provider, Adapter)
        request = ModelRequest("m", "sys", HELLO, [], on_text=_ignore if streamed else None)
        response = await provider.answer(request)

    assert response.usage == EXPECTED[name]


def test_usage_adds_and_subtracts_the_cache_counts() -> None:
    one = Usage(model_calls=1, input_tokens=10, cached_input_tokens=4, cache_write_input_tokens=2)
    two = Usage(model_calls=1, input_tokens=20, cached_input_tokens=8, output_tokens=3)

    assert one + two == Usage(
        model_calls=2,
        input_tokens=30,
        output_tokens=3,
        cached_input_tokens=12,
        cache_write_input_tokens=2,
    )
    assert (one + two) - one == two


def test_usage_from_before_the_cache_fields_decodes_with_none_cached() -> None:
    old = Usage.model_validate_json('{"model_calls": 2, "input_tokens": 9, "output_tokens": 4}')

    assert (old.cached_input_tokens, old.cache_write_input_tokens) == (0, 0)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", ["openai", "openai-responses"])
async def test_the_cache_key_goes_as_openais_prompt_cache_key(
    wire: WireServer, name: str, streamed: bool
) -> None:
    async with connected(name, wire.url) as provider:
        assert isinstance(provider, Adapter)
        on_text = _ignore if streamed else None
        await provider.answer(ModelRequest("m", "", HELLO, [], on_text=on_text, cache_key="k-1"))
        await provider.answer(ModelRequest("m", "", HELLO, [], on_text=on_text))

    keyed, unkeyed = (request.body for request in wire.requests)
    assert keyed["prompt_cache_key"] == "k-1"
    assert "prompt_cache_key" not in unkeyed


@pytest.mark.parametrize("name", list(REPLIES))
async def test_a_server_that_reports_no_cache_counts_none_cached(
    wire: WireServer, name: str
) -> None:
    # An OpenAI-compatible server (vLLM, Ollama...) or an older API gives no cache fields at all.
    reply = REPLIES[name]
    usage = {
        key: value
        for key, value in reply["usage"].items()
        if "details" not in key and "cache" not in key
    }
    wire.enqueue({**reply, "usage": usage})

    async with connected(name, wire.url) as provider:
        response = await provider.complete("m", "", HELLO, [])

    assert (response.usage.cached_input_tokens, response.usage.cache_write_input_tokens) == (0, 0)
    assert response.usage.input_tokens == usage.get("prompt_tokens", usage.get("input_tokens"))
