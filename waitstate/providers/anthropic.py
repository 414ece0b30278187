"""Anthropic Messages behind the provider-neutral protocol.

With extended thinking on (`ModelSettings.thinking_tokens`), a reply's `thinking` and
`redacted_thinking` blocks, with their signatures, are kept on the assistant message
(`Message.provider_items`, with where its text and tool calls stood) and sent back unchanged, in
their order and before the tool calls they led to, on the next calls to the same provider and
model: the API refuses a tool round trip whose thinking did not come back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anthropic
import httpx2
from anthropic import AsyncStream
from anthropic.types import (
    ContentBlock,
    ContentBlockParam,
    MessageParam,
    RawMessageStreamEvent,
    ToolParam,
    ToolResultBlockParam,
)
from anthropic.types import Message as AnthropicMessage
from anthropic.types import Usage as AnthropicUsage

from waitstate.providers.base import ModelRequest, kept_within
from waitstate.providers.sdk import CONNECTION_LOST, SdkProvider
from waitstate.schemas import Message, ModelResponse, ToolCall, ToolDefinition, Usage
from waitstate.schemas.messages import ProviderItems

log = logging.getLogger(__name__)

# The counts a stream's `message_delta` may bring up to date.
_COUNTS = {
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
}


# The API takes at most 4 cache breakpoints a request; `_mark_for_cache` sets that many at most.
EPHEMERAL = {"type": "ephemeral"}
# What a reply keeps for the next calls is bounded (its blocks are the model's output, which we
# do not control): past this many characters of JSON (about 64k tokens of thinking, more than
# the budgets one sets), its thinking is dropped, logged, and the turn's next call goes without
# thinking, which the API accepts where a tool call without its thinking it would refuse.
MAX_THINKING_CHARS = 256_000
# The blocks of a reply that are its thinking, sent back as they came.
THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


class AnthropicProvider(SdkProvider[anthropic.AsyncAnthropic]):
    """Calls `client.messages.create` (the client built with `max_retries=0`); streamed when the
    request takes the text as it is written (`ModelRequest.on_text`).

    With `prompt_cache` (the default), each request marks where Anthropic's prompt cache may
    keep its prefix (`cache_control`, see `_mark_for_cache`), so a conversation's earlier turns
    are read from the cache from its second call on.
    """

    name = "anthropic"

    def __init__(
        self, client: anthropic.AsyncAnthropic, max_tokens: int = 4096, *, prompt_cache: bool = True
    ) -> None:
        super().__init__(client)
        self._max_tokens = max_tokens
        self._prompt_cache = prompt_cache

    async def answer(self, request: ModelRequest) -> ModelResponse:
        """Ask the model for its next message (`settings.max_tokens` caps the answer; this
        SDK's Messages API takes no temperature); with `request.on_text`, the answer is
        streamed and each piece of its text handed to it as it comes (the reply is the same).

        Raises:
            ProviderError: the API answered with an error status, or could not be reached, or
                the stream broke off.
        """
        settings = request.settings
        budget = _thinking_budget(request, self.name)
        system: Any = request.system_prompt or anthropic.omit
        own = (self.name, request.model) if budget else None
        messages: list[Any] = _to_anthropic_messages(request.messages, own)
        tools: list[Any] = [_to_anthropic_tool(tool) for tool in request.tools]
        if self._prompt_cache:
            # A breakpoint goes on a block: the system prompt is sent as one.
            system = (
                [{"type": "text", "text": request.system_prompt}] if request.system_prompt else []
            )
            _mark_for_cache(tools, system, messages)
            system = system or anthropic.omit
        # The thinking counts in `max_tokens`: unless the agent set it, the answer gets the
        # provider's default on top of the thinking's budget.
        max_tokens = (settings and settings.max_tokens) or self._max_tokens + (budget or 0)
        asked: dict[str, Any] = {
            "model": request.model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": messages,
            "tools": tools or anthropic.omit,
            "thinking": (
                {"type": "enabled", "budget_tokens": budget} if budget else anthropic.omit
            ),
        }
        api = self._client.messages
        try:
            if request.on_text is None:
                response: AnthropicMessage = await api.create(**asked)
                return self._reply(response, request.model)
            stream = await api.create(**asked, stream=True)
            url = stream.response.url
            try:
                streamed = await _from_anthropic_stream(stream, request.on_text, request.on_chunk)
            except httpx2.TransportError as err:
                # Older SDKs leave a connection lost while the events come untranslated.
                raise self._no_response(CONNECTION_LOST, err, url) from err
            except anthropic.APIConnectionError as err:
                # Newer ones raise their own error for it, the transport's as its cause.
                raise self._no_response(CONNECTION_LOST, err.__cause__, url) from err
            except anthropic.APIError as err:
                # An error event in the middle of the stream (`overloaded_error`, say): the SDK
                # raises it with the stream's own status, 200, which says nothing of whether
                # another attempt could succeed; as for a lost connection, it may.
                raise self._no_response(_api_message(err), None, url) from err
            if streamed is None:
                raise self._no_response("The stream ended before the message did.", None, url)
            return self._reply(streamed, request.model)
        except anthropic.APIStatusError as err:
            message = _api_message(err)
            raise self._status_error(message, err.status_code, err.response.headers) from err
        except anthropic.APIConnectionError as err:  # APITimeoutError included
            raise self._no_response(err.message, err.__cause__, err.request.url) from err

    def _reply(self, response: AnthropicMessage, model: str) -> ModelResponse:
        reply = _from_anthropic(response)
        kept = _kept_blocks(response)
        if kept:
            items = ProviderItems(provider=self.name, model=model, items=kept)
            reply.message.provider_items = items
        return reply


def _thinking_budget(request: ModelRequest, provider: str) -> int | None:
    """The thinking's budget of this call: the settings' `thinking_tokens`, unless the turn in
    progress (the conversation ends with tool results) comes back to tool calls whose thinking
    is not here to send back (dropped over `MAX_THINKING_CHARS`, or the calls were another
    model's: a budget's degrade). With thinking on, the API refuses a turn's last tool calls
    without their thinking before them; this one call goes without thinking instead."""
    budget = request.settings.thinking_tokens if request.settings else None
    messages = request.messages
    if not budget or not messages or messages[-1].role != "tool":
        return budget
    last = next((m for m in reversed(messages) if m.role == "assistant"), None)
    if last is None or not last.tool_calls:
        return budget
    kept = _own_blocks(last, (provider, request.model))
    if any(block.get("type") in THINKING_BLOCKS for block in kept):
        return budget
    log.info("%s: tool calls without their thinking: %s asked without", provider, request.model)
    return None


def _mark_for_cache(
    tools: list[dict[str, Any]], system: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> None:
    """Set the request's cache breakpoints (`cache_control`), at most 4, in place.

    The cache keeps a request's prefix (tools, then system, then messages) up to a breakpoint,
    and a later request that begins with the same prefix reads it at a tenth of the price
    (writing it costs a quarter more than sending it). The breakpoints:

    - the last tool and the system prompt: what every call of an agent begins with;
    - the last message of the previous call's request (the one before the latest assistant
      message): the prefix that call wrote, read back whole however many blocks the latest
      turn added (the API looks for earlier entries only 20 blocks back from a breakpoint);
    - the last message: this whole request, which is the next call's prefix (the model's reply
      and the results of its calls come after it). Not in a call with neither tools nor an
      earlier turn (a checkpoint, a one-off question): nothing would read it back.

    Prefixes under the model's minimum (1,024 tokens for most) are not cached, and cost nothing
    more: the API ignores their breakpoints.
    """
    if tools:
        tools[-1] = {**tools[-1], "cache_control": EPHEMERAL}
    if system:
        system[-1] = {**system[-1], "cache_control": EPHEMERAL}
    replied = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    if replied and replied[-1] > 0:
        _mark_message(messages, replied[-1] - 1)
    if messages and (replied or tools):
        _mark_message(messages, len(messages) - 1)


def _mark_message(messages: list[dict[str, Any]], index: int) -> None:
    """Put a breakpoint on the last block of `messages[index]` (its text made a block if it is
    a string), unless that block is empty text, which the API refuses one on."""
    message = messages[index]
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if not blocks or (blocks[-1].get("type") == "text" and not blocks[-1].get("text")):
        return
    blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
    messages[index] = {**message, "content": blocks}


def _api_message(err: anthropic.APIError) -> str:
    # `api_message` is the API's own explanation, without the SDK's body dump.
    explained = err.api_message if isinstance(err, anthropic.APIStatusError) else None
    return explained or err.message


def _to_anthropic_messages(
    messages: Sequence[Message], own: tuple[str, str] | None
) -> list[MessageParam]:
    """The conversation as the API takes it; with `own` (this provider and model, when the call
    thinks), assistant messages carry the thinking blocks kept with them."""
    wire: list[MessageParam] = []
    # Results of one round of tool calls travel together in a single user turn.
    results: list[ToolResultBlockParam] | None = None
    for message in messages:
        if message.role == "tool":
            result: ToolResultBlockParam = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content,
                "is_error": message.is_error,
            }
            if results is None:
                results = [result]
                wire.append({"role": "user", "content": results})
            else:
                results.append(result)
            continue
        results = None
        if message.role == "user":
            wire.append({"role": "user", "content": message.content})
        else:
            kept = _own_blocks(message, own) if own else []
            wire.append({"role": "assistant", "content": _to_anthropic_blocks(message, kept)})
    return wire


def _own_blocks(message: Message, own: tuple[str, str]) -> list[dict[str, Any]]:
    """The blocks the provider and model `own` kept with `message` (none from another)."""
    kept = message.provider_items
    if kept is None or (kept.provider, kept.model) != own:
        return []
    return kept.items


def _to_anthropic_blocks(message: Message, kept: list[dict[str, Any]]) -> list[ContentBlockParam]:
    """An assistant message as content blocks: those its provider kept, in their order (the
    thinking as given; the text and tool calls, where they stood, filled in from the message
    itself), then what they did not cover."""
    calls = {call.id: call for call in message.tool_calls}
    blocks: list[Any] = []
    said = False
    for block in kept:
        kind = block.get("type")
        if kind in THINKING_BLOCKS:
            blocks.append(block)
        elif kind == "text" and message.content and not said:
            said = True  # its text, with any other text block's, is the one content
            blocks.append({"type": "text", "text": message.content})
        elif kind == "tool_use" and (call := calls.pop(block.get("id", ""), None)) is not None:
            blocks.append(_tool_use(call))
    if message.content and not said:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(_tool_use(call) for call in calls.values())
    # Thinking that led to nothing sent (an answer cut off while the model thought): left out.
    while blocks and blocks[-1].get("type") in THINKING_BLOCKS:
        blocks.pop()
    return blocks


def _tool_use(call: ToolCall) -> ContentBlockParam:
    return {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": _tool_input(call.arguments),
    }


def _tool_input(arguments: str) -> dict[str, Any]:
    # The API accepts only a JSON object here, and one malformed call from the model must
    # not make the whole conversation unsendable.
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _to_anthropic_tool(tool: ToolDefinition) -> ToolParam:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def _from_anthropic(response: AnthropicMessage) -> ModelResponse:
    text = "".join(block.text for block in response.content if block.type == "text")
    calls = [
        ToolCall(id=block.id, name=block.name, arguments=json.dumps(block.input))
        for block in response.content
        if block.type == "tool_use"
    ]
    return ModelResponse(
        message=Message(role="assistant", content=text, tool_calls=calls),
        usage=_usage(response.usage),
        stop_reason=response.stop_reason or "",
        model=response.model,
    )


def _kept_blocks(response: AnthropicMessage) -> list[dict[str, Any]]:
    """What of the reply's content is sent back with its message: nothing, unless the model
    thought; then its thinking blocks as they came (their known fields only), and where its
    text and tool calls stood (the ids of the calls; their text and input are the message's)."""
    if not any(block.type in THINKING_BLOCKS for block in response.content):
        return []
    kept: list[dict[str, Any]] = []
    for block in response.content:
        if block.type == "thinking":
            kept.append(
                {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
            )
        elif block.type == "redacted_thinking":
            kept.append({"type": "redacted_thinking", "data": block.data})
        elif block.type == "text":
            kept.append({"type": "text"})
        elif block.type == "tool_use":
            kept.append({"type": "tool_use", "id": block.id})
    return kept_within(kept, MAX_THINKING_CHARS, "thinking", f"message {response.id}")


def _usage(usage: AnthropicUsage) -> Usage:
    """One call's usage. Anthropic's `input_tokens` are only those after the last cache
    breakpoint; ours count the whole prompt (as OpenAI's do), so the tokens read from the cache
    and those written to it are added back."""
    read = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    return Usage(
        model_calls=1,
        input_tokens=usage.input_tokens + read + written,
        output_tokens=usage.output_tokens,
        cached_input_tokens=read,
        cache_write_input_tokens=written,
    )


async def _from_anthropic_stream(
    stream: AsyncStream[RawMessageStreamEvent],
    on_text: Callable[[str], Awaitable[None]],
    on_chunk: Callable[[], None] | None = None,
) -> AnthropicMessage | None:
    """The message the API answers unstreamed, put together from the stream's events, each
    piece of text handed to `on_text` as it comes, `on_chunk` called at every event; None if the stream ended before the message
    did (no `message_stop`: a truncated answer must not pass for a whole one)."""
    message: AnthropicMessage | None = None
    blocks: dict[int, ContentBlock] = {}  # a block's index -> the block as it was opened
    written: dict[int, list[str]] = {}  # a block's index -> its text, input's JSON or thinking
    signed: dict[int, list[str]] = {}  # a thinking block's index -> its signature, so far
    stop_reason = None
    counts: dict[str, int | None] = {}  # the usage's counts, as the events last gave them
    stopped = False
    async with stream:
        async for event in stream:
            if on_chunk is not None:
                on_chunk()
            if event.type == "message_start":
                message = event.message
            elif event.type == "content_block_start":
                blocks[event.index] = event.content_block
            elif event.type == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    written.setdefault(event.index, []).append(delta.text)
                    await on_text(delta.text)
                elif delta.type == "input_json_delta":
                    written.setdefault(event.index, []).append(delta.partial_json)
                elif delta.type == "thinking_delta":
                    written.setdefault(event.index, []).append(delta.thinking)
                elif delta.type == "signature_delta":
                    signed.setdefault(event.index, []).append(delta.signature)
            elif event.type == "message_delta":
                stop_reason = event.delta.stop_reason
                # Its counts are totals so far, not increments; those of the input (and of
                # the cache) may be left out, and then stand as `message_start` gave them.
                counts.update(
                    (name, value)
                    for name, value in event.usage.model_dump(include=_COUNTS).items()
                    if value is not None
                )
            elif event.type == "message_stop":
                stopped = True
    if message is None or not stopped:
        return None
    content = [
        _completed(blocks[index], "".join(written.get(index, [])), "".join(signed.get(index, [])))
        for index in sorted(blocks)
    ]
    usage = message.usage.model_copy(update=counts)
    return message.model_copy(
        update={"content": content, "stop_reason": stop_reason, "usage": usage}
    )


def _completed(block: ContentBlock, written: str, signed: str) -> ContentBlock:
    """A streamed content block as it is once its pieces (`written`, and a thinking block's
    signature, `signed`) have all come."""
    if block.type == "text":
        return block.model_copy(update={"text": block.text + written})
    if block.type == "tool_use":
        # The API sends JSON objects only (no pieces at all: `{}`); should it break that, the
        # call gets an empty input, as a malformed one gets on its way back (`_tool_input`).
        return block.model_copy(update={"input": _tool_input(written)})
    if block.type == "thinking":
        update = {"thinking": block.thinking + written, "signature": block.signature + signed}
        return block.model_copy(update=update)
    # A redacted_thinking block comes whole when opened; blocks the reply does not read
    # (server tools) are left as opened.
    return block
