"""OpenAI Chat Completions behind the provider-neutral protocol."""

from __future__ import annotations

from collections.abc import Sequence

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

from waitstate.providers.base import ModelRequest
from waitstate.providers.sdk import SdkProvider
from waitstate.schemas import Message, ModelResponse, ToolCall, ToolDefinition, Usage


class OpenAIProvider(SdkProvider[openai.AsyncOpenAI]):
    """Calls `client.chat.completions.create` (the client built with `max_retries=0`)."""

    name = "openai"

    async def answer(self, request: ModelRequest) -> ModelResponse:
        """Ask the model for its next message.

        Raises:
            ProviderError: the API answered with an error status, or could not be reached.
        """
        settings, tools = request.settings, request.tools
        try:
            response = await self._client.chat.completions.create(
                model=request.model,
                messages=_to_openai_messages(request.system_prompt, request.messages),
                tools=[_to_openai_tool(tool) for tool in tools] if tools else openai.omit,
                temperature=(
                    settings.temperature
                    if settings is not None and settings.temperature is not None
                    else openai.omit
                ),
                max_completion_tokens=(
                    settings.max_tokens
                    if settings is not None and settings.max_tokens is not None
                    else openai.omit
                ),
            )
        except openai.APIStatusError as err:
            message = _server_message(err)
            raise self._status_error(message, err.status_code, err.response.headers) from err
        except openai.APIConnectionError as err:  # APITimeoutError included
            raise self._no_response(err.message, err.__cause__, err.request.url) from err
        return _from_openai(response)


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
        usage=Usage(
            model_calls=1,
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
        ),
        stop_reason=choice.finish_reason,
        model=response.model,
    )


def _server_message(err: openai.APIStatusError) -> str:
    # The SDK's own message repeats the status and dumps the body; the API's `message`
    # is the part worth reading.
    if isinstance(err.body, dict) and isinstance(message := err.body.get("message"), str):
        return message
    return err.message
