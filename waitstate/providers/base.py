"""The one protocol every model adapter implements, the base of our own adapters, and the
error they raise."""

from __future__ import annotations

import abc
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, runtime_checkable

from waitstate.schemas import Message, ModelResponse, ToolDefinition
from waitstate.schemas.errors import LATER_MODEL_INVALID, MODEL_SPEC_INVALID

# Checked wherever a run starts, as well as here: imported from where it was.
from waitstate.schemas.run import parse_model_spec as parse_model_spec

# HTTP statuses worth another attempt; every other 4xx means the request itself is wrong.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
# A provider's explanation is kept to this many characters, on one line: it ends up in a
# Temporal failure (which must stay small), in `status` and on the CLI's stderr.
MESSAGE_CHARS = 500


@dataclass(frozen=True)
class ModelSettings:
    """An agent's settings for its model calls (None: the provider's own default)."""

    temperature: float | None = None
    max_tokens: int | None = None
    # Extended thinking's budget (Anthropic's `thinking.budget_tokens`); None: no thinking.
    thinking_tokens: int | None = None


class Provider(Protocol):
    """A model behind one provider: Chat Completions, Messages, or a script."""

    name: str

    async def complete(
        self,
        model: str,
        system_prompt: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        settings: ModelSettings | None = None,
    ) -> ModelResponse:
        """Ask the model for its next message (with `settings`, where the provider takes them).

        Raises:
            ProviderError: the provider refused or failed the call.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; called once when the worker stops."""
        ...


@runtime_checkable
class BackgroundProvider(Provider, Protocol):
    """A provider that can answer in the background: its calls may return a reply not given
    yet (`ModelResponse.background_id`), which is then asked for until it is, or cancelled."""

    async def poll(self, response_id: str, model: str) -> ModelResponse | None:
        """The reply of the background response `response_id`, asked of `model` (as the run's
        spec names it), once it is given; None while the provider works on it.

        Raises:
            ResponseFailed: the response ended without a reply (failed, or cancelled).
            ProviderError: the provider could not be asked.
        """
        ...

    async def cancel(self, response_id: str) -> None:
        """Stop the background response `response_id` (one that ended stays as it is).

        Raises:
            ProviderError: the provider refused or could not be asked.
        """
        ...


@runtime_checkable
class NamedModels(Provider, Protocol):
    """A provider that knows the models it has (the scripted one: its scripts), so a model it
    does not have can be refused before a run would call it."""

    def check_model(self, model: str) -> None:
        """Raises UnknownModelError if this provider has no model `model`."""
        ...


@dataclass(frozen=True)
class ModelRequest:
    """One model call: the arguments of `Provider.complete`, as one value.

    A field the calls gain (a prompt-cache key, a response format, a budget) is added here
    once, not to the signature of every adapter.
    """

    model: str
    system_prompt: str
    messages: Sequence[Message]
    tools: Sequence[ToolDefinition]
    settings: ModelSettings | None = None
    # Given the text of the answer as it is written, piece by piece, by a provider that streams
    # (the others ignore it). Set by the model activity only; what it is given is ephemeral:
    # the answer returned is the same either way.
    on_text: Callable[[str], Awaitable[None]] | None = None
    # Called at every event of a streamed answer (its text, a tool call's arguments, thinking,
    # usage): the model activity heartbeats on it, so a call whose stream flows is seen alive
    # by its chunks (the activity throttles it: it must stay cheap). Providers that do not
    # stream ignore it.
    on_chunk: Callable[[], None] | None = None
    # Names the conversation for the provider's prompt cache (OpenAI's `prompt_cache_key`):
    # calls with the same key and the same prefix go where that prefix is cached. Set by the
    # model activity, one per run; adapters without such a key ignore it.
    cache_key: str | None = None


class Adapter(abc.ABC):
    """The base of the built-in providers: implements the `Provider` protocol by packing each
    call into a `ModelRequest` for `answer`.

    A provider may subclass it, or implement the protocol directly.
    """

    name: str

    async def complete(
        self,
        model: str,
        system_prompt: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        settings: ModelSettings | None = None,
    ) -> ModelResponse:
        """`answer` the call (the `Provider` protocol's `complete`, and what it raises)."""
        return await self.answer(ModelRequest(model, system_prompt, messages, tools, settings))

    @abc.abstractmethod
    async def answer(self, request: ModelRequest) -> ModelResponse:
        """Ask the model for its next message.

        Raises:
            ProviderError: the provider refused or failed the call.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections; called once when the worker stops."""


class UnknownModelError(ValueError):
    """The model spec names no configured provider, model script, or a provider not set up."""

    # What the model activity fails with for it (never retried: the request itself is wrong).
    failure_type = MODEL_SPEC_INVALID


class LaterModelError(UnknownModelError):
    """A model the run would go on with later (a budget's `degrade_to`) cannot be called here:
    the run fails at once, not when it would switch to it."""

    failure_type = LATER_MODEL_INVALID


class ProviderError(Exception):
    """A provider call failed; says whether another attempt could succeed."""

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.provider = provider
        self.status = status
        self.retry_after = retry_after
        where = f"HTTP {status}" if status is not None else "no response"
        super().__init__(f"{provider}: {where}: {shorten(message, MESSAGE_CHARS)}")

    @property
    def retryable(self) -> bool:
        """True for timeouts, conflicts, rate limits, server errors and lost connections."""
        return self.status is None or self.status in RETRYABLE_STATUSES or self.status >= 500


class ResponseFailed(Exception):
    """A background response ended without a reply (it failed, or was cancelled at the
    provider): asking for it again would change nothing."""

    def __init__(self, provider: str, response_id: str, status: str, message: str) -> None:
        self.provider = provider
        self.response_id = response_id
        self.status = status
        super().__init__(
            f"{provider}: background response {response_id} {status}: "
            f"{shorten(message, MESSAGE_CHARS)}"
        )


def no_response_message(message: str, cause: BaseException | None, url: object) -> str:
    """Why a call got no answer, and where it went.

    The SDKs say only "Connection error." or "Request timed out."; the transport's own
    exception (their `__cause__`) says why, and the URL says which server was tried (an
    OpenAI-compatible `base_url` is often the culprit). The query string is left out.
    """
    reason = str(cause).strip() if cause is not None else ""
    where = str(url).partition("?")[0]
    return f"{message} {reason} ({where})" if reason else f"{message} ({where})"


def kept_within(
    items: list[dict[str, Any]], limit: int, what: str, reply_id: str
) -> list[dict[str, Any]]:
    """`items` a reply leaves for the next calls (its reasoning, its thinking), or none if their
    JSON is over `limit` characters (a model's output is not kept unbounded; logged)."""
    size = len(json.dumps(items))
    if size > limit:
        logging.getLogger(__name__).warning(
            "%s of %s not kept: %d characters, over %d", what, reply_id, size, limit
        )
        return []
    return items


def shorten(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters (an ellipsis marks the cut)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def retry_after_seconds(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Read `retry-after-ms` or `retry-after` (seconds or an HTTP date) from response headers."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return max(float(ms) / 1000, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)
