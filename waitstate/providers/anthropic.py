"""Anthropic Messages behind the provider-neutral protocol."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anthropic
from anthropic.types import ContentBlockParam, MessageParam, ToolParam, ToolResultBlockParam
from anthropic.types import Message as AnthropicMessage

from waitstate.providers.base import ModelRequest
from waitstate.providers.sdk import SdkProvider
from waitstate.schemas import Message, ModelResponse, ToolCall, ToolDefinition, Usage


class AnthropicProvider(SdkProvider[anthropic.AsyncAnthropic]):
    """Calls `client.messages.create` (the client built with `max_retries=0`)."""

    name = "anthropic"

    def __init__(self, client: anthropic.AsyncAnthropic, max_tokens: int = 4096) -> None:
        super().__init__(client)
        self._max_tokens = max_tokens

    async def answer(self, request: ModelRequest) -> ModelResponse:
        """Ask the model for its next message (`settings.max_tokens` caps the answer; this
        SDK's Messages API takes no temperature).

        Raises:
            ProviderError: the API answered with an error status, or could not be reached.
        """
        settings, tools = request.settings, request.tools
        try:
            response = await self._client.messages.create(
                model=request.model,
                max_tokens=(settings and settings.max_tokens) or self._max_tokens,
                system=request.system_prompt or anthropic.omit,
                messages=_to_anthropic_messages(request.messages),
                tools=[_to_anthropic_tool(tool) for tool in tools] if tools else anthropic.omit,
            )
        except anthropic.APIStatusError as err:
            # `api_message` is the API's own explanation, without the SDK's body dump.
            message = err.api_message or err.message
            raise self._status_error(message, err.status_code, err.response.headers) from err
        except anthropic.APIConnectionError as err:  # APITimeoutError included
            raise self._no_response(err.message, err.__cause__, err.request.url) from err
        return _from_anthropic(response)


def _to_anthropic_messages(messages: Sequence[Message]) -> list[MessageParam]:
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
            wire.append({"role": "assistant", "content": _to_anthropic_blocks(message)})
    return wire


def _to_anthropic_blocks(message: Message) -> list[ContentBlockParam]:
    blocks: list[ContentBlockParam] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)}
        for call in message.tool_calls
    )
    return blocks


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
        usage=Usage(
            model_calls=1,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
        ),
        stop_reason=response.stop_reason or "",
        model=response.model,
    )
