"""OpenAI Chat Completions behind the provider-neutral protocol."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import httpx
import openai
from openai import AsyncStream
from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsBase,
    CompletionCreateParamsStreaming,
)

from waitstate.providers.base import ModelRequest
from waitstate.providers.sdk import CONNECTION_LOST, SdkProvider
from waitstate.schemas import Message, ModelResponse, ToolCall, ToolDefinition, Usage


class OpenAIProvider(SdkProvider[openai.AsyncOpenAI]):
    """Calls `client.chat.completions.create` (the client built with `max_retries=0`); streamed
    when the request takes the text as it is written (`ModelRequest.on_text`); the request's
    `cache_key` goes as `prompt_cache_key`."""

    name = "openai"

    async def answer(self, request: ModelRequest) -> ModelResponse:
        """Ask the model for its next message; with `request.on_text`, the answer is streamed
        and each piece of its text handed to it as it comes (the reply is the same).

        Raises:
            ProviderError: the API answered with an error status, or could not be reached, or
                the stream broke off.
        """
        settings = request.settings
        params: CompletionCreateParamsBase = {
            "model": request.model,
            "messages": _to_openai_messages(request.system_prompt, request.messages),
        }
        if request.tools:
            params["tools"] = [_to_openai_tool(tool) for tool in request.tools]
        if settings is not None and settings.temperature is not None:
            params["temperature"] = settings.temperature
        if settings is not None and settings.max_tokens is not None:
            params["max_completion_tokens"] = settings.max_tokens
        if request.cache_key:
            params["prompt_cache_key"] = request.cache_key
        completions = self._client.chat.completions
        try:
            if request.on_text is None:
                return _from_openai(await completions.create(**params))
            streamed: CompletionCreateParamsStreaming = {
                **params,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            stream = await completions.create(**streamed)
            try:
                return await _from_openai_stream(stream, request.on_text, request.on_chunk)
            except httpx.TransportError as err:
                # The SDK leaves a connection lost while the chunks come untranslated.
                raise self._no_response(CONNECTION_LOST, err, stream.response.url) from err
            except openai.APIConnectionError as err:
                # Or, in versions that translate it, raises its own, the transport's as its cause.
                url = stream.response.url
                raise self._no_response(CONNECTION_LOST, err.__cause__, url) from err
        except openai.APIStatusError as err:
            message = _server_message(err)
            raise self._status_error(message, err.status_code, err.response.headers) from err
        except openai.APIConnectionError as err:  # APITimeoutError included
            raise self._no_response(err.message, err.__cause__, err.request.url) from err
        except openai.APIError as err:  # an error event in the middle of a stream
            raise self._no_response(err.message, None, err.request.url) from err


def _to_openai_messages(
    system_prompt: str, messages: Sequence[Message]
) -> list[ChatCompletionMessageParam]:
    wire: list[ChatCompletionMessageParam] = []
    if system_prompt:
        wire.append({"role": "system", "content": system_prompt})
    for message in messages:
        if message.role == "user":
            wire.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            wire.append(_to_openai_assistant(message))
        else:
            content = f"ERROR: {message.content}" if message.is_error else message.content
            wire.append(
                {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": content}
            )
    return wire


def _to_openai_assistant(message: Message) -> ChatCompletionAssistantMessageParam:
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in message.tool_calls
    ]
    # The API expects null, not "", beside tool calls when the model said nothing.
    return {"role": "assistant", "content": message.content or None, "tool_calls": calls}


def _to_openai_tool(tool: ToolDefinition) -> ChatCompletionFunctionToolParam:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _from_openai(response: ChatCompletion) -> ModelResponse:
    choice = response.choices[0]
    calls = [
        # Arguments stay as the model wrote them, malformed or not: judging them is the
        # tool layer's job, and it can tell the model what was wrong.
        ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)
        for call in choice.message.tool_calls or []
        # Only function tools are offered, so custom tool calls cannot come back.
        if call.type == "function"
    ]
    usage = response.usage
    return ModelResponse(
        message=Message(role="assistant", content=choice.message.content or "", tool_calls=calls),
        usage=_usage(usage),
        stop_reason=choice.finish_reason,
        model=response.model,
    )


async def _from_openai_stream(
    stream: AsyncStream[ChatCompletionChunk],
    on_text: Callable[[str], Awaitable[None]],
    on_chunk: Callable[[], None] | None = None,
) -> ModelResponse:
    """The reply `_from_openai` makes of the whole answer, put together from its chunks, each
    piece of text handed to `on_text` as it comes, `on_chunk` called at every chunk."""
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}  # a call's index -> its id, name and arguments so far
    finish_reason = ""
    usage = None
    model = ""
    async with stream:
        async for chunk in stream:
            if on_chunk is not None:
                on_chunk()
            model = chunk.model or model
            usage = chunk.usage or usage  # on the last chunk, which has no choices
            for choice in chunk.choices:
                if choice.index != 0:  # one choice is asked for
                    continue
                finish_reason = choice.finish_reason or finish_reason
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    await on_text(delta.content)
                for piece in delta.tool_calls or []:
                    call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                    # Every part may come in pieces, as the SDK's own accumulation allows.
                    call["id"] += piece.id or ""
                    if piece.function is not None:
                        call["name"] += piece.function.name or ""
                        call["arguments"] += piece.function.arguments or ""
    return ModelResponse(
        message=Message(
            role="assistant",
            content="".join(text),
            tool_calls=[ToolCall(**calls[index]) for index in sorted(calls)],
        ),
        usage=_usage(usage),
        stop_reason=finish_reason,
        model=model,
    )


def _usage(usage: CompletionUsage | None) -> Usage:
    """One call's usage; `prompt_tokens` already counts the cached ones, as ours does."""
    if usage is None:
        return Usage(model_calls=1)
    details = usage.prompt_tokens_details
    return Usage(
        model_calls=1,
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cached_input_tokens=(details and details.cached_tokens) or 0,
        cache_write_input_tokens=(details and details.cache_write_tokens) or 0,
    )


def _server_message(err: openai.APIStatusError) -> str:
    # The SDK's own message repeats the status and dumps the body; the API's `message`
    # is the part worth reading.
    if isinstance(err.body, dict) and isinstance(message := err.body.get("message"), str):
        return message
    return err.message
