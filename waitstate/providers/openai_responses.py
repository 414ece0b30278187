"""OpenAI's Responses API (`/v1/responses`) behind the provider-neutral protocol.

Stateless: every call sends the whole conversation as `input` items (`store=False`, so
nothing of it is kept by OpenAI between calls), the system prompt as `instructions`. A
reasoning model's `reasoning` items (asked for with their `encrypted_content`, which
`store=False` needs) are kept on the assistant message (`Message.provider_items`) and sent
back, in their order and before the function calls they led to, on the next calls to the same
provider and model.

Background (a model spec's option, `openai-responses:o3?background`): each response is
created with `background=True`, which OpenAI requires to be stored (`store=True`): the response
is kept by OpenAI, to be retrieved by its id, until it is deleted or expires there. A response
still `queued` or `in_progress` comes back at once as its id (`ModelResponse.background_id`);
the run asks for it (`poll`, `responses.retrieve`) until it ends, and `cancel`s it
(`responses.cancel`) if it is no longer wanted. Background calls are not streamed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import openai
from openai import AsyncStream
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseInputItemParam,
    ResponseStreamEvent,
)

from waitstate.providers.base import (
    ModelRequest,
    ResponseFailed,
    UnknownModelError,
    kept_within,
)
from waitstate.providers.sdk import CONNECTION_LOST, SdkProvider
from waitstate.schemas import Message, ModelResponse, ToolCall, ToolDefinition, Usage
from waitstate.schemas.messages import ProviderItems

log = logging.getLogger(__name__)

# What a reply keeps for the next calls is bounded: past this many characters of JSON (a long
# chain of thought, encrypted), its items are dropped and the next calls send the message and
# its calls alone, which the API accepts (the model reasons afresh). The transcript, stored
# once per turn, stays within a few such replies.
MAX_ITEMS_CHARS = 64_000
# Asked of every call: with store=False, reasoning items are of use later only with it.
ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"
# The model spec's option that asks for background responses (`<model>?background`).
BACKGROUND = "background"
# The statuses of a background response still being worked on.
PENDING = ("queued", "in_progress")


class OpenAIResponsesProvider(SdkProvider[openai.AsyncOpenAI]):
    """Calls `client.responses.create` (the client built with `max_retries=0`); streamed when
    the request takes the text as it is written (`ModelRequest.on_text`); the request's
    `cache_key` goes as `prompt_cache_key`; a model named with `?background` is asked in the
    background (see the module's docstring)."""

    name = "openai-responses"

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        super().__init__(client)
        # Models that refused `include` (those that do not reason answer 400 "Encrypted content
        # is not supported with this model", param "include"): asked without it from then on.
        self._no_include: set[str] = set()

    async def answer(self, request: ModelRequest) -> ModelResponse:
        """Ask the model for its next message; with `request.on_text`, the answer is streamed
        and each piece of its text handed to it as it comes (the reply is the same).

        Raises:
            ProviderError: the API answered with an error status, or could not be reached, or
                the stream broke off or failed.
            UnknownModelError: the model names an option this provider does not know.
        """
        model, background = self._options(request.model)
        request = dataclasses.replace(request, model=model)
        if request.model not in self._no_include:
            try:
                return await self._answer(request, include=True, background=background)
            except _IncludeRefused:
                # Asked once more, at once: not a retry of the same request, which would fail
                # again, but the request this model takes.
                self._refused_include(request.model)
        return await self._answer(request, include=False, background=background)

    async def poll(self, response_id: str, model: str) -> ModelResponse | None:
        """The reply of the background response `response_id` of `model` (the spec's model,
        `?background` and all) once it ended; None while it is `queued` or `in_progress`.

        Raises:
            ResponseFailed: the response failed or was cancelled.
            ProviderError: the API answered with an error status, or could not be reached.
        """
        model, _ = self._options(model)
        include = model not in self._no_include
        try:
            response = await self._client.responses.retrieve(
                response_id, include=[ENCRYPTED_REASONING] if include else openai.omit
            )
        except openai.APIStatusError as err:
            if include and err.status_code == 400 and _param(err) == "include":
                self._refused_include(model)
                return await self.poll(response_id, model)
            message = _api_message(err)
            raise self._status_error(message, err.status_code, err.response.headers) from err
        except openai.APIConnectionError as err:
            raise self._no_response(err.message, err.__cause__, err.request.url) from err
        if response.status in PENDING:
            return None
        if response.status in ("failed", "cancelled"):
            error = response.error
            why = error.message if error is not None else "no reply was given"
            raise ResponseFailed(self.name, response_id, response.status, why)
        return self._reply(response, model)

    async def cancel(self, response_id: str) -> None:
        """Cancel the background response `response_id` (one that ended stays as it is).

        Raises:
            ProviderError: the API answered with an error status, or could not be reached.
        """
        try:
            await self._client.responses.cancel(response_id)
        except openai.APIStatusError as err:
            message = _api_message(err)
            raise self._status_error(message, err.status_code, err.response.headers) from err
        except openai.APIConnectionError as err:
            raise self._no_response(err.message, err.__cause__, err.request.url) from err

    def _options(self, model: str) -> tuple[str, bool]:
        """The model's name and whether it is asked in the background (`<model>?background`).

        Raises:
            UnknownModelError: an option other than `background`.
        """
        name, asked, option = model.partition("?")
        if asked and option != BACKGROUND:
            raise UnknownModelError(
                f"{self.name}: unknown option {option!r} in model {model!r} (known: {BACKGROUND})"
            )
        return name, bool(asked)

    def _refused_include(self, model: str) -> None:
        log.info("%s: %s takes no encrypted reasoning", self.name, model)
        self._no_include.add(model)

    async def _answer(
        self, request: ModelRequest, *, include: bool, background: bool
    ) -> ModelResponse:
        settings, tools = request.settings, request.tools
        asked: dict[str, Any] = {
            "model": request.model,
            "input": _to_input(request.messages, self.name, request.model),
            "instructions": request.system_prompt or openai.omit,
            "tools": [_to_tool(tool) for tool in tools] if tools else openai.omit,
            # A background response must be stored: OpenAI keeps it, to be retrieved by id.
            "store": background,
            "background": True if background else openai.omit,
            "prompt_cache_key": request.cache_key or openai.omit,
            "include": [ENCRYPTED_REASONING] if include else openai.omit,
            "temperature": (
                settings.temperature
                if settings is not None and settings.temperature is not None
                else openai.omit
            ),
            "max_output_tokens": (
                settings.max_tokens
                if settings is not None and settings.max_tokens is not None
                else openai.omit
            ),
        }
        responses = self._client.responses
        try:
            if request.on_text is None or background:
                response: Response = await responses.create(**asked)
                if background and response.status in PENDING:
                    return _pending(response)
                return self._reply(response, request.model)
            stream: AsyncStream[ResponseStreamEvent] = await responses.create(**asked, stream=True)
            url = stream.response.url
            try:
                streamed = await _from_stream(stream, request.on_text, request.on_chunk)
            except openai.APIConnectionError as err:
                # The SDK's own error for a connection lost part way, the transport's as its
                # cause; said as the other adapters say it.
                raise self._no_response(CONNECTION_LOST, err.__cause__, url) from err
            except openai.APIError as err:
                # A chunk of the stream that is an error: the stream's status, 200, says
                # nothing of whether another attempt could succeed; as for a lost connection,
                # it may.
                raise self._no_response(_api_message(err), None, url) from err
            if isinstance(streamed, str):
                raise self._no_response(streamed, None, url)
            return self._reply(streamed, request.model)
        except openai.APIStatusError as err:
            if include and err.status_code == 400 and _param(err) == "include":
                raise _IncludeRefused from err
            message = _api_message(err)
            raise self._status_error(message, err.status_code, err.response.headers) from err
        except openai.APIConnectionError as err:  # APITimeoutError included
            raise self._no_response(err.message, err.__cause__, err.request.url) from err

    def _reply(self, response: Response, model: str) -> ModelResponse:
        calls = [
            # Arguments stay as the model wrote them (the tool layer judges them).
            ToolCall(id=item.call_id, name=item.name, arguments=item.arguments)
            for item in response.output
            if item.type == "function_call"
        ]
        items = _kept_items(response)
        usage = response.usage
        # Left out by some servers that speak the API (the SDK does not check).
        cache = getattr(usage, "input_tokens_details", None)
        details = response.incomplete_details
        return ModelResponse(
            message=Message(
                role="assistant",
                content=response.output_text,
                tool_calls=calls,
                provider_items=(
                    ProviderItems(provider=self.name, model=model, items=items) if items else None
                ),
            ),
            usage=Usage(
                model_calls=1,
                # Counts the cached tokens too, as ours does.
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                cached_input_tokens=getattr(cache, "cached_tokens", None) or 0,
                cache_write_input_tokens=getattr(cache, "cache_write_tokens", None) or 0,
            ),
            stop_reason=(details.reason if details and details.reason else response.status) or "",
            model=response.model,
        )


def _pending(response: Response) -> ModelResponse:
    """A background response not given yet: its id, for the run to wait for it."""
    return ModelResponse(
        message=Message(role="assistant"),
        usage=Usage(),
        stop_reason=response.status or "",
        model=response.model,
        background_id=response.id,
    )


class _IncludeRefused(Exception):
    """The model takes no `include` of encrypted reasoning (it does not reason)."""


def _param(err: openai.APIStatusError) -> str | None:
    body = err.body
    return body.get("param") if isinstance(body, dict) else None


def _api_message(err: openai.APIError) -> str:
    # The SDK's own message repeats the status and dumps the body; the API's `message` is the
    # part worth reading (as the Chat Completions adapter reads it, for stream errors too).
    if isinstance(err.body, dict) and isinstance(message := err.body.get("message"), str):
        return message
    return err.message


def _to_tool(tool: ToolDefinition) -> FunctionToolParam:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        # The API's default is strict, which refuses most schemas as written (every property
        # required, no additional ones); the tool layer validates the arguments anyway.
        "strict": False,
    }


def _to_input(
    messages: Sequence[Message], provider: str, model: str
) -> list[ResponseInputItemParam]:
    wire: list[ResponseInputItemParam] = []
    for message in messages:
        if message.role == "user":
            wire.append({"role": "user", "content": message.content})
        elif message.role == "tool":
            content = f"ERROR: {message.content}" if message.is_error else message.content
            wire.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id or "",
                    "output": content,
                }
            )
        else:
            kept = message.provider_items
            own = kept is not None and (kept.provider, kept.model) == (provider, model)
            wire.extend(_assistant_items(message, kept.items if kept and own else []))
    return wire


def _assistant_items(message: Message, kept: list[dict[str, Any]]) -> list[Any]:
    """An assistant message as input items: the items its provider kept, in their order (the
    reasoning as given, the message and function calls filled in from the message itself, so
    they carry their ids, which the reasoning is tied to), then what they did not cover."""
    calls = {call.id: call for call in message.tool_calls}
    items: list[Any] = []
    said = False
    for item in kept:
        kind = item.get("type")
        if kind == "message":
            if said or not message.content:
                continue  # its text, with any other message item's, is the one content
            said = True
            text = {"type": "output_text", "text": message.content, "annotations": []}
            items.append({**item, "role": "assistant", "status": "completed", "content": [text]})
        elif kind == "function_call":
            call = calls.pop(item.get("call_id", ""), None)
            if call is not None:
                items.append({**item, "name": call.name, "arguments": call.arguments})
        else:
            items.append(item)
    if message.content and not said:
        items.append({"role": "assistant", "content": message.content})
    items += [
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        }
        for call in calls.values()
    ]
    # Reasoning that led to nothing sent (an answer cut off while the model reasoned) is
    # refused by the API without the item that followed it: it is left out.
    while items and items[-1].get("type") == "reasoning":
        items.pop()
    return items


def _kept_items(response: Response) -> list[dict[str, Any]]:
    """What of the response's output is sent back with its message: nothing, unless the model
    reasoned; then its reasoning items whole, and where its message and function calls stood
    (their ids, which the reasoning is tied to; their text and arguments are the message's)."""
    if not any(item.type == "reasoning" for item in response.output):
        return []
    kept: list[dict[str, Any]] = []
    for item in response.output:
        if item.type == "reasoning":
            kept.append(item.model_dump(mode="json", exclude_none=True, by_alias=True))
        elif item.type == "message":
            place = {"type": "message", "id": item.id}
            kept.append({**place, "phase": item.phase} if item.phase else place)
        elif item.type == "function_call" and item.id:
            kept.append({"type": "function_call", "id": item.id, "call_id": item.call_id})
    return kept_within(kept, MAX_ITEMS_CHARS, "reasoning", f"response {response.id}")


async def _from_stream(
    stream: AsyncStream[ResponseStreamEvent],
    on_text: Callable[[str], Awaitable[None]],
    on_chunk: Callable[[], None] | None = None,
) -> Response | str:
    """The response the API answers unstreamed: the one its last event carries
    (`response.completed`, or `response.incomplete`), each piece of text handed to `on_text`
    as it comes, `on_chunk` called at every event; else why there is none (the stream failed, or ended before the response did:
    a truncated answer must not pass for a whole one).

    The stream is read to its end, past the event that ends the response: one left early
    leaves the SDK's async generators suspended in a reference cycle (closing the stream
    closes its HTTP response, not them), for the garbage collector to finalize in whatever
    thread it runs, where it can meet the event loop closing them
    (docs/upstream/async-generator-gc-thread.md)."""
    ended: Response | str | None = None
    async with stream:
        async for event in stream:
            if ended is not None:
                continue
            if on_chunk is not None:
                on_chunk()
            if event.type == "response.output_text.delta":
                await on_text(event.delta)
            elif event.type in ("response.completed", "response.incomplete"):
                ended = event.response
            elif event.type == "response.failed":
                failed = event.response.error
                ended = failed.message if failed is not None else "The response failed."
            elif event.type == "error":
                ended = event.message
    return ended if ended is not None else "The stream ended before the response did."
