"""Figure 8: what prompt caching saves on a conversation's input.

A conversation of `Sizes.cache_messages` user messages, each answered by one model call that
sends the whole conversation so far (an agent's system prompt and tools first), through our
adapters on the real SDK clients, against the stand-in with its prompt caches simulated
(`WireServer(prompt_cache=True)`, prefixes of 1,024 tokens or more, as the providers' minimum).
The calls carry the run's cache key as the model-call activity sets it.

Billed input is counted in tokens at the base input price: uncached input at 1, plus what the
cache served and took at the provider's prices (PRICES). With caching against without:

- Anthropic: our breakpoints (`cache_control`) against the same adapter without them
  (`AnthropicProvider(prompt_cache=False)`: Anthropic caches only what a request marks).
- OpenAI (Chat Completions, Responses): OpenAI caches every prompt's prefix by itself, so
  "without" is the same calls' input billed whole, as if nothing had been cached (the usage
  before it counted cached tokens read it so).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import openai

from bench.figures import Row, Sizes
from waitstate.activities.model import cache_key
from waitstate.providers.anthropic import AnthropicProvider
from waitstate.providers.base import Adapter, ModelRequest
from waitstate.providers.openai import OpenAIProvider
from waitstate.providers.openai_responses import OpenAIResponsesProvider
from waitstate.schemas import Message, ToolDefinition, Usage
from waitstate.testing.wire_server import (
    WireServer,
    anthropic_text,
    openai_text,
    responses_text,
)

# Per token, as a fraction of the provider's base input price: (cache read, cache write).
# Anthropic: reads 0.1x, writes 1.25x (5-minute entries). OpenAI: cached input 0.5x (gpt-4o's
# discount; newer models give more), writes at no extra charge.
PRICES = {
    "anthropic": (0.1, 1.25),
    "openai": (0.5, 1.0),
    "openai-responses": (0.5, 1.0),
}
MIN_CACHED_TOKENS = 1_024
MODEL = "bench-cache"
# An agent's instructions and tools: what every call of a run begins with (about 1,700 tokens).
SYSTEM_PROMPT = "\n".join(
    f"Rule {n}: when the customer asks about their order, look it up before answering, quote "
    f"the order's id, never promise a date the carrier has not given, and say what you did."
    for n in range(1, 41)
)
TOOLS = [
    ToolDefinition(
        name=name,
        description=f"{description} Use it only when the customer's question needs it.",
        parameters={
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "The order's id."}},
            "required": ["order_id"],
        },
    )
    for name, description in [
        ("lookup_order", "Look an order up by its id: items, status, carrier, dates."),
        ("track_parcel", "Track the parcel of an order with its carrier."),
        ("refund_order", "Refund an order, whole or in part; needs a person's approval."),
        ("open_ticket", "Open a ticket with the warehouse about an order."),
    ]
]
ANSWER = "Your order is on its way; the carrier says it arrives on Friday. " * 5


REPLIES: dict[str, Callable[[str], dict[str, Any]]] = {
    "anthropic": anthropic_text,
    "openai": openai_text,
    "openai-responses": responses_text,
}


def _message(n: int) -> str:
    return f"Message {n}: where is my order A-{1000 + n}, and can you check it again? " * 3


async def _conversation(name: str, wire: WireServer, messages: int, marks: bool) -> list[Usage]:
    """The usage of each call of one conversation of `messages` user messages."""
    used = []
    conversation: list[Message] = []
    async with _provider(name, wire, marks) as provider:
        for n in range(1, messages + 1):
            conversation.append(Message(role="user", content=_message(n)))
            wire.enqueue(REPLIES[name](ANSWER))
            request = ModelRequest(
                MODEL, SYSTEM_PROMPT, conversation, TOOLS, cache_key=cache_key("bench-thread")
            )
            response = await provider.answer(request)
            conversation.append(response.message)
            used.append(response.usage)
    return used


@asynccontextmanager
async def _provider(name: str, wire: WireServer, marks: bool) -> AsyncIterator[Adapter]:
    """The adapter `name` on its SDK client for `wire`, as the worker builds it (no retries);
    Anthropic's with its cache breakpoints or without (`marks`)."""
    if name == "anthropic":
        async with anthropic.AsyncAnthropic(
            api_key="bench", base_url=wire.anthropic_base_url, max_retries=0
        ) as client:
            yield AnthropicProvider(client, prompt_cache=marks)
        return
    async with openai.AsyncOpenAI(
        api_key="bench", base_url=wire.openai_base_url, max_retries=0
    ) as oa:
        yield OpenAIProvider(oa) if name == "openai" else OpenAIResponsesProvider(oa)


def billed(name: str, used: list[Usage]) -> float:
    """Input tokens at the base price: uncached at 1, cached and written at PRICES."""
    read_price, write_price = PRICES[name]
    total = 0.0
    for usage in used:
        uncached = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_input_tokens
        total += uncached + usage.cached_input_tokens * read_price
        total += usage.cache_write_input_tokens * write_price
    return total


async def figure8(sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """Billed input tokens of a conversation with prompt caching against without, for each
    provider (the "floor" column is without)."""
    rows = []
    for name in PRICES:
        saved = Row(
            "8", f"billed input, {sizes.cache_messages} messages, {name} (floor: uncached)",
            "tokens", target="< uncached", check=lambda _, ratio: ratio is not None and ratio < 1,
        )  # fmt: skip
        read = Row("8", f"input read from the cache, {name}", "%")
        for rep in range(reps):
            with WireServer(prompt_cache=True, cache_min_tokens=MIN_CACHED_TOKENS) as wire:
                cached = await _conversation(name, wire, sizes.cache_messages, marks=True)
            if name == "anthropic":
                with WireServer(prompt_cache=True, cache_min_tokens=MIN_CACHED_TOKENS) as wire:
                    plain = await _conversation(name, wire, sizes.cache_messages, marks=False)
                uncached = billed(name, plain)
            else:
                uncached = float(sum(usage.input_tokens for usage in cached))
            total = sum(cached, Usage())
            saved.ours.append(billed(name, cached))
            saved.floor.append(uncached)
            read.ours.append(100 * total.cached_input_tokens / max(total.input_tokens, 1))
            log(
                f"  fig 8 rep {rep + 1} {name}: {total.input_tokens:,} input tokens, "
                f"{total.cached_input_tokens:,} read from the cache, "
                f"{total.cache_write_input_tokens:,} written; billed {saved.ours[-1]:,.0f} "
                f"against {uncached:,.0f} uncached ({saved.ours[-1] / uncached:.2f}x)"
            )
        rows += [saved, read]
    return rows
