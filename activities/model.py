"""The model-call activity: a thin adapter from a provider to Temporal's retry semantics.

With a gateway to post to (`DeltaTarget`), a provider that streams hands the activity the
answer's text as it is written, and the activity posts it to the gateway for the run's readers
(`activities.deltas`): never into its result, never into the run's history.

A call heartbeats (`activities.pulse`): by its stream's chunks while they come, from a side task
while it waits in silence, so a worker lost mid-call is noticed within the call's heartbeat
timeout (`workflows.policies.MODEL_HEARTBEAT`) rather than its start-to-close.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote

from pydantic import TypeAdapter, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.agents import Agent
from waitstate.blobs import BlobNotFound, BlobStore, BlobStoreUnavailable
from waitstate.mcp import is_mcp_name
from waitstate.providers import Provider, ProviderError, Providers, UnknownModelError
from waitstate.providers.base import Adapter, ModelRequest, ModelSettings, shorten
from waitstate.schemas import Message, ModelCallInput, ModelResponse, ToolDefinition
from waitstate.schemas.builtin import REF_PREFIX
from waitstate.schemas.errors import (
    BLOB_STORE_UNAVAILABLE,
    MODEL_REQUEST_REJECTED,
    MODEL_SPEC_INVALID,
    MODEL_UNAVAILABLE,
    RUN_INPUT_INVALID,
)
from waitstate.schemas.run import CALL_MODEL, StoreFailure
from waitstate.tools import ToolRegistry
from waitstate.tools.spec import describe_errors
from waitstate.tracing import chat_span

from .deltas import DeltaPublisher, DeltaTarget
from .mcp import read_listing
from .pulse import progress, pulse

if TYPE_CHECKING:
    from waitstate.tracing import Tracing

_TRANSCRIPT = TypeAdapter(list[Message])
T = TypeVar("T")

# Temporal keeps a retrying activity's last failure, stack traces and causes included, in 4 KB
# (`limit.mutableStateActivityFailureSize.error`); past that, the Web UI and `describe` show
# "Failure exceeds size limit." instead. An SDK's chain of causes alone is over 4 KB, so these
# failures carry a bounded one-line message and no cause; the worker's log keeps the chain.
FAILURE_CHARS = 600
# The provider call gets the attempt's start-to-close timeout (the run's `model_timeout`) less
# this margin, so a model that hangs fails with an error naming the provider and the limit
# rather than Temporal's bare "activity StartToClose timeout".
DEADLINE_MARGIN = timedelta(seconds=5)
# A publish token outlives its call's attempt (its start-to-close timeout) by this much.
PUBLISH_TOKEN_MARGIN = timedelta(minutes=1)


class ModelActivities:
    """Model calls, given the providers, the tool registry, and the blob store that holds
    conversations (shared by every worker, so any worker can take any turn); with `tracing`,
    each provider call is a span (`chat {model}`); with `deltas`, a streaming provider's text
    goes to the gateway as it is written; with `pace`, each request to a provider waits for it
    first (the model queue's rate, worker.py's `ModelCallPace`)."""

    def __init__(
        self,
        providers: Providers,
        tools: ToolRegistry,
        blobs: BlobStore,
        agents: Mapping[str, Agent] | None = None,
        *,
        tracing: Tracing | None = None,
        deltas: DeltaTarget | None = None,
        pace: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._providers = providers
        self._tools = tools
        self._blobs = blobs
        self._agents = dict(agents or {})
        self._tracing = tracing
        self._deltas = deltas
        self._pace = pace

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, input: ModelCallInput) -> ModelResponse:
        """Ask the run's model for its next message.

        The conversation is the stored transcript `input.transcript_ref` followed by
        `input.new_messages`; the reply comes back with a reference to the conversation
        including it, so the run's history never carries the whole transcript.

        A reply the model gave before the blob store failed to keep it comes back to the run
        (the failure's `StoreFailure`), which hands it in again as `input.answered`: it is
        stored then, and the model is not asked twice.

        Raises:
            ApplicationError: non-retryable when the request itself is wrong (bad spec, unknown
                tool, a 4xx the provider will repeat); retryable otherwise (no answer in time,
                lost connection, 408/409/429/5xx), with the provider's `retry-after` as the next
                delay; `BLOB_STORE_UNAVAILABLE` when the blob store could not be read or
                written. Its message is one line, and names the provider when the call failed.
        """
        async with pulse():
            return await self._reply(input)

    async def _reply(self, input: ModelCallInput) -> ModelResponse:
        try:
            provider, model = self._providers.resolve(input.model, later=input.later_models)
        except UnknownModelError as err:  # the run's model, or one it would go on with later
            raise failure(str(err), err.failure_type, non_retryable=True) from None
        try:
            tools = self._tools.definitions([n for n in input.tools if not is_mcp_name(n)])
        except KeyError as err:
            raise failure(err.args[0], RUN_INPUT_INVALID, non_retryable=True) from None
        if input.mcp_listing is not None:
            listing = await _stored(input, read_listing(self._blobs, input.mcp_listing))
            tools += [listing[n].definition for n in input.tools if n in listing]
        conversation = await _stored(input, self.conversation(input))
        response = input.answered or await self._ask(input, provider, model, tools, conversation)
        if response.background_id is not None:  # not given yet: the run waits for it
            return response
        return await self.kept(input, conversation, response)

    async def kept(
        self, input: ModelCallInput, conversation: list[Message], response: ModelResponse
    ) -> ModelResponse:
        """The reply to `input`, stored after `conversation`, as the run records it."""
        # Content-addressed: a retried or replayed turn names the very same conversation. The
        # reference travels only between the run and this activity, so it goes bare (the
        # digest), and the run counts its own model calls: each reply's record in the run's
        # history is the shorter for both.
        stored = _TRANSCRIPT.dump_json([*conversation, response.message])
        ref = await _stored(input, self._blobs.put(stored, activity.info().workflow_id), response)
        response.transcript_ref = ref.removeprefix(REF_PREFIX)
        response.usage = response.usage.model_copy(update={"model_calls": 0})
        # Why the provider stopped and how it names its model are for the trace and the
        # metrics (read above); the run never reads them, so its history goes without them.
        response.stop_reason = response.model = ""
        if response.message.provider_items is not None:
            # The provider's own items (a reasoning model's encrypted reasoning: kilobytes a
            # turn) go back to it from the stored transcript; the run never reads them, so its
            # history goes without them.
            response.message = response.message.model_copy(update={"provider_items": None})
        return response

    async def _ask(
        self,
        input: ModelCallInput,
        provider: Provider,
        model: str,
        tools: list[ToolDefinition],
        conversation: list[Message],
    ) -> ModelResponse:
        """The provider's reply (an agent's final answer checked against its output type),
        counted in the metrics."""
        agent = self._agents.get(input.agent) if input.agent is not None else None
        settings = None
        if agent is not None:
            chosen = (agent.temperature, agent.max_tokens, agent.thinking_tokens)
            settings = ModelSettings(*chosen) if chosen != (None, None, None) else None
        publisher = self._publisher(input, provider)
        if self._pace is not None:  # the model queue's rate: as near the request as can be
            await self._pace()
        with chat_span(self._tracing, provider.name, model) as span:
            span.request(input.system_prompt, conversation)
            try:
                response = await _complete(
                    provider,
                    model,
                    input.system_prompt,
                    conversation,
                    tools,
                    settings,
                    on_text=publisher.add if publisher is not None else None,
                    on_chunk=progress,
                    cache_key=cache_key(activity.info().workflow_id),
                )
                if publisher is not None:
                    await publisher.finish()
            finally:
                if publisher is not None:
                    publisher.stop()
            span.response(response)
        return response if response.background_id else self.counted(input, provider, response)

    def counted(
        self, input: ModelCallInput, provider: Provider, response: ModelResponse
    ) -> ModelResponse:
        """A reply of `provider`, checked against the agent's output type, in the metrics."""
        if input.agent is not None and not response.message.tool_calls:
            self._check_output(input.agent, response)
        meter = activity.metric_meter()
        labels = {"provider": provider.name}
        meter.create_counter("waitstate_model_calls", "Model calls").add(1, labels)
        tokens = meter.create_counter("waitstate_model_tokens", "Model tokens")
        tokens.add(response.usage.input_tokens, {**labels, "direction": "input"})
        tokens.add(response.usage.output_tokens, {**labels, "direction": "output"})
        # Part of the input counted above: what the provider's prompt cache served, or took.
        cache = meter.create_counter(
            "waitstate_model_cache_tokens", "Input tokens read from or written to a prompt cache"
        )
        cache.add(response.usage.cached_input_tokens, {**labels, "kind": "read"})
        cache.add(response.usage.cache_write_input_tokens, {**labels, "kind": "write"})
        return response

    def _publisher(self, input: ModelCallInput, provider: Provider) -> DeltaPublisher | None:
        """What posts this call's text to the gateway, if there is one to post to and the
        provider can stream (our adapters take a `ModelRequest`; the protocol cannot)."""
        if self._deltas is None or not isinstance(provider, Adapter):
            return None
        info = activity.info()
        if info.workflow_id is None:  # a call outside any run: no readers
            return None
        lifetime = (info.start_to_close_timeout or timedelta(hours=1)) + PUBLISH_TOKEN_MARGIN
        token = self._deltas.tokens.mint_publish(info.workflow_id, datetime.now(UTC) + lifetime)
        url = f"{self._deltas.gateway_url.rstrip('/')}/v1/runs/"
        url += f"{quote(info.workflow_id, safe='')}/deltas"
        call = f"{info.activity_id}.{info.attempt}"
        # Readers place a delta by its call; the turn is theirs to tell (from the run's events).
        return DeltaPublisher(self._deltas.http, url, token, None, call)

    def _check_output(self, agent_name: str, response: ModelResponse) -> None:
        """A final answer of an agent with an output type: normalized to its JSON if it
        validates, else `output_error` says why (the run sends it back to the model)."""
        agent = self._agents.get(agent_name)
        if agent is None or agent.output_type is None:
            return
        text = _unfenced(response.message.content)
        try:
            value = agent.output_type.model_validate_json(text)
        except ValidationError as err:
            response.output_error = describe_errors(err, "(answer)")
            return
        response.message.content = value.model_dump_json()

    async def conversation(self, input: ModelCallInput) -> list[Message]:
        """The conversation `input` asks about: its stored transcript, then its new messages."""
        earlier = []
        if input.transcript_ref is not None:
            ref = input.transcript_ref
            ref = ref if ref.startswith(REF_PREFIX) else REF_PREFIX + ref
            earlier = _TRANSCRIPT.validate_json(await self._blob(ref))
        new = [
            message.model_copy(
                update={
                    "content": (await self._blob(message.content_ref)).decode(),
                    "content_ref": None,
                }
            )
            if message.content_ref
            else message
            for message in input.new_messages
        ]
        return [*earlier, *new]

    async def _blob(self, ref: str) -> bytes:
        try:
            return await self._blobs.get(ref)
        except BlobNotFound:
            raise failure(
                f"{ref} is not in this worker's blob store (workers must share one)",
                RUN_INPUT_INVALID,
                non_retryable=True,
            ) from None


async def _complete(
    provider: Provider,
    model: str,
    system_prompt: str,
    conversation: list[Message],
    tools: list[ToolDefinition],
    settings: ModelSettings | None = None,
    *,
    on_text: Callable[[str], Awaitable[None]] | None = None,
    on_chunk: Callable[[], None] | None = None,
    cache_key: str | None = None,
) -> ModelResponse:
    """One provider call within the attempt's deadline, its failures turned into Temporal's;
    with `on_text`, an adapter of ours streams the answer's text to it (and calls `on_chunk` at
    every chunk); an adapter of ours is given `cache_key` for its prompt cache."""
    limit = activity.info().start_to_close_timeout
    budget = limit - min(DEADLINE_MARGIN, limit / 10) if limit else None
    deadline = asyncio.timeout(budget.total_seconds() if budget else None)
    try:
        async with deadline:
            if isinstance(provider, Adapter):
                request = ModelRequest(
                    model,
                    system_prompt,
                    conversation,
                    tools,
                    settings,
                    on_text=on_text,
                    on_chunk=on_chunk,
                    cache_key=cache_key,
                )
                return await provider.answer(request)
            if settings is None:  # a provider written before settings existed works on
                return await provider.complete(model, system_prompt, conversation, tools)
            return await provider.complete(model, system_prompt, conversation, tools, settings)
    except UnknownModelError as err:
        raise failure(str(err), MODEL_SPEC_INVALID, non_retryable=True) from None
    except ProviderError as err:
        if not err.retryable:
            raise failure(str(err), MODEL_REQUEST_REJECTED, non_retryable=True) from None
        delay = timedelta(seconds=err.retry_after) if err.retry_after is not None else None
        raise failure(str(err), MODEL_UNAVAILABLE, next_retry_delay=delay) from None
    except TimeoutError as err:
        if not deadline.expired() or limit is None:
            raise _unexpected(provider, err) from None
        raise failure(
            f"{provider.name}: no answer within the run's model_timeout of "
            f"{limit.total_seconds():g} s",
            MODEL_UNAVAILABLE,
        ) from None
    except Exception as err:
        raise _unexpected(provider, err) from None


def cache_key(workflow_id: str | None) -> str | None:
    """The prompt-cache key of a run's model calls: a digest of its workflow id (None outside
    any run).

    One key per run, not per agent: most of a long run's input is its own transcript, which only
    its own later calls can reuse, and OpenAI sends the calls of one prefix and key to the same
    machines (the key keeps a run's turns where its transcript is cached). A key shared by every
    run of an agent would send them all to the same few machines, which overflow past about 15
    requests a minute and scatter the turns of each run. The workflow id outlives
    continue-as-new, so a thread keeps its key for life; it goes as a digest, since ids may
    name customers.
    """
    if workflow_id is None:
        return None
    return "waitstate-" + hashlib.sha256(workflow_id.encode()).hexdigest()[:32]


async def _stored(
    input: ModelCallInput, step: Awaitable[T], answered: ModelResponse | None = None
) -> T:
    """A step on the blob store, whose outage fails the attempt as `BLOB_STORE_UNAVAILABLE`
    (counted in `waitstate_blob_store_errors`). The failure tells the run (which waits
    outages out) which attempt met the outage and the model's reply, if `answered` already
    (not when the run handed the reply in: it has it)."""
    try:
        return await step
    except BlobStoreUnavailable as err:
        info = activity.info()
        activity.metric_meter().create_counter(
            "waitstate_blob_store_errors", "Activity attempts the blob store failed"
        ).add(1, {"activity": info.activity_type})
        details = []
        if input.answered is None:
            # A try with the reply in hand is retried by Temporal: nothing to hand back.
            details = [StoreFailure(attempt=info.attempt, answered=answered)]
        raise ApplicationError(
            shorten(f"blob store unavailable: {err}", FAILURE_CHARS),
            *details,
            type=BLOB_STORE_UNAVAILABLE,
        ) from None


def _unfenced(text: str) -> str:
    """The JSON of an answer, without the Markdown code fence models often wrap it in."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.removeprefix("```json").removeprefix("```").removesuffix("```")
    return stripped.strip()


def _unexpected(provider: Provider, err: Exception) -> ApplicationError:
    # A bug, or an SDK error the adapter does not translate: retried as any exception is,
    # and typed by its class as Temporal would, but in a form Temporal keeps whole. The
    # traceback goes to the worker's log.
    activity.logger.warning("model call failed unexpectedly", exc_info=err)
    return ApplicationError(
        shorten(f"{provider.name}: {type(err).__name__}: {err}", FAILURE_CHARS),
        type=type(err).__name__,
    )


def failure(
    message: str,
    type: str,
    *,
    non_retryable: bool = False,
    next_retry_delay: timedelta | None = None,
) -> ApplicationError:
    return ApplicationError(
        shorten(message, FAILURE_CHARS),
        type=type,
        non_retryable=non_retryable,
        next_retry_delay=next_retry_delay,
    )
