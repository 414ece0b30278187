"""OpenAIResponsesProvider through the real SDK client, against the local wire server: what a
Responses API request and answer become, and the reasoning items a reasoning model's replies
carry into the next calls (its failures: test_errors.py; its streams:
test_openai_responses_streaming.py)."""

from __future__ import annotations

import json
from typing import Any

from tests.providers.adapters import (
    HELLO,
    LOOKUP,
    adapter_fixture,
    connected,
    conversation_sent,
)
from waitstate.providers.base import ModelRequest, ModelSettings
from waitstate.providers.openai_responses import MAX_ITEMS_CHARS, OpenAIResponsesProvider
from waitstate.schemas import Message, ToolCall
from waitstate.schemas.messages import ProviderItems
from waitstate.testing.wire_server import (
    WireServer,
    param_error,
    responses_function_calls,
    responses_text,
)

PARIS = ("call_1", "lookup", '{"city": "Paris"}')


provider = adapter_fixture("openai-responses", OpenAIResponsesProvider)


async def _ask(
    provider: OpenAIResponsesProvider, messages: list[Message], model: str = "gpt-test"
) -> Any:
    return await provider.answer(ModelRequest(model, "Be terse.", messages, [LOOKUP]))


async def test_conversation_converts_to_input_items(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    body = await conversation_sent(wire, provider, "gpt-test", "/v1/responses")
    assert body["instructions"] == "You are terse."
    # Stateless: nothing kept by OpenAI, the reasoning handed to us instead.
    assert body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["input"] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"city": "Paris"}'},
        # Arguments that are not JSON are sent as the model wrote them.
        {"type": "function_call", "call_id": "call_2", "name": "lookup", "arguments": '{"city": '},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "ERROR: bad JSON"},
        {"role": "assistant", "content": "Checking Oslo."},
        {"type": "function_call", "call_id": "call_3", "name": "lookup", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_3", "output": "ERROR: no such city"},
        {"role": "user", "content": "Thanks."},
    ]  # fmt: skip
    assert body["tools"] == [
        {
            "type": "function",
            "name": "lookup",
            "description": "Look a city up.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            # The API's default (strict) would refuse most schemas as written.
            "strict": False,
        }
    ]
    for left_out in ("temperature", "max_output_tokens", "stream", "previous_response_id"):
        assert left_out not in body


async def test_no_tools_and_no_system_prompt_are_left_out(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    await provider.complete("gpt-test", "", HELLO, [])

    body = wire.requests[-1].body
    assert "tools" not in body and "instructions" not in body
    assert body["input"] == [{"role": "user", "content": "hello"}]


async def test_model_settings_reach_the_request(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    await provider.complete("m", "sys", HELLO, [], ModelSettings(0.2, 300))

    body = wire.requests[-1].body
    assert (body["temperature"], body["max_output_tokens"]) == (0.2, 300)


async def test_text_answer_with_usage(wire: WireServer, provider: OpenAIResponsesProvider) -> None:
    wire.enqueue(responses_text("Paris.", input_tokens=12, output_tokens=3, model="gpt-test-0001"))

    response = await provider.complete("gpt-test", "Be brief.", HELLO, [])

    assert response.message == Message(role="assistant", content="Paris.")
    assert (response.usage.model_calls, response.usage.input_tokens) == (1, 12)
    assert response.usage.output_tokens == 3
    assert (response.stop_reason, response.model) == ("completed", "gpt-test-0001")


async def test_function_calls_survive(wire: WireServer, provider: OpenAIResponsesProvider) -> None:
    wire.enqueue(
        responses_function_calls(
            [PARIS, ("call_2", "lookup", '{"city": ')], text="Looking both up."
        )
    )

    response = await _ask(provider, HELLO)

    assert response.message.content == "Looking both up."
    assert response.message.tool_calls == [
        ToolCall(id="call_1", name="lookup", arguments='{"city": "Paris"}'),
        # Malformed JSON is kept, not repaired or dropped.
        ToolCall(id="call_2", name="lookup", arguments='{"city": '),
    ]
    # A model that did not reason leaves nothing of its own to send back.
    assert response.message.provider_items is None


async def test_reasoning_items_go_back_in_order_before_the_calls_they_led_to(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    first_reply = responses_function_calls([PARIS], text="Checking.", reasoning="enc-1")
    wire.enqueue(first_reply, responses_text("Sunny.", reasoning="enc-2"), responses_text("ok"))

    first = await _ask(provider, HELLO)
    result = Message(role="tool", tool_call_id="call_1", name="lookup", content="sunny")
    second = await _ask(provider, [*HELLO, first.message, result])
    thanks = Message(role="user", content="Thanks.")
    await _ask(provider, [*HELLO, first.message, result, second.message, thanks])

    reasoning, message, call = first_reply["output"]
    assert first.message.provider_items == ProviderItems(
        provider="openai-responses",
        model="gpt-test",
        items=[
            reasoning,  # whole, as given
            {"type": "message", "id": message["id"]},  # where the text and calls stood
            {"type": "function_call", "id": call["id"], "call_id": "call_1"},
        ],
    )
    assert wire.requests[1].body["input"] == [
        {"role": "user", "content": "hello"},
        reasoning,
        {
            "type": "message",
            "id": message["id"],
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        # Its id ties the call to the reasoning before it.
        {**{k: call[k] for k in ("type", "id", "call_id", "name", "arguments")}},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    sent = wire.requests[2].body["input"]
    assert [item.get("type", item.get("role")) for item in sent] == [
        "user", "reasoning", "message", "function_call", "function_call_output", "reasoning",
        "message", "user",
    ]  # fmt: skip
    assert [i["encrypted_content"] for i in sent if i.get("type") == "reasoning"] == [
        "enc-1",
        "enc-2",
    ]


async def test_reasoning_goes_back_to_its_own_provider_and_model_only(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    wire.enqueue(responses_function_calls([PARIS], reasoning="enc-1"))
    first = await _ask(provider, HELLO)
    result = Message(role="tool", tool_call_id="call_1", name="lookup", content="sunny")

    await _ask(provider, [*HELLO, first.message, result], model="another-model")
    async with connected("openai", wire.url) as chat:
        await chat.complete("gpt-test", "", [*HELLO, first.message, result], [LOOKUP])

    assert wire.requests[1].body["input"] == [
        {"role": "user", "content": "hello"},
        # Without its reasoning, and without the id that would tie it to that reasoning.
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]  # fmt: skip
    assert "enc-1" not in json.dumps(wire.requests[2].body)  # Chat Completions


async def test_an_answer_cut_off_while_reasoning_sends_back_no_reasoning(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    cut = responses_text("", reasoning="enc-1")
    cut["output"] = cut["output"][:1]  # the reasoning alone: no message came
    cut["status"], cut["incomplete_details"] = "incomplete", {"reason": "max_output_tokens"}
    wire.enqueue(cut)

    first = await _ask(provider, HELLO)
    await _ask(provider, [*HELLO, first.message, Message(role="user", content="Go on.")])

    assert (first.message.content, first.stop_reason) == ("", "max_output_tokens")
    # Reasoning with nothing after it is refused by the API; it is left out.
    assert wire.requests[1].body["input"] == [
        {"role": "user", "content": "hello"},
        {"role": "user", "content": "Go on."},
    ]


async def test_reasoning_past_the_cap_is_not_kept(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    wire.enqueue(responses_function_calls([PARIS], reasoning="x" * MAX_ITEMS_CHARS))

    response = await _ask(provider, HELLO)

    assert response.message.provider_items is None
    assert [call.id for call in response.message.tool_calls] == ["call_1"]


async def test_a_model_that_does_not_reason_is_asked_again_without_include_once(
    wire: WireServer, provider: OpenAIResponsesProvider
) -> None:
    refusal = param_error(400, "Encrypted content is not supported with this model.", "include")
    wire.enqueue(refusal, responses_text("Paris."), responses_text("Oslo."))

    first = await _ask(provider, HELLO, model="gpt-4.1")
    second = await _ask(provider, HELLO, model="gpt-4.1")

    assert (first.message.content, second.message.content) == ("Paris.", "Oslo.")
    asked = [request.body for request in wire.requests]
    assert [body.get("include") for body in asked] == [["reasoning.encrypted_content"], None, None]


async def test_a_message_from_before_provider_items_still_decodes() -> None:
    old = '{"role": "assistant", "content": "hi", "tool_calls": [], "tool_call_id": null}'

    assert Message.model_validate_json(old).provider_items is None


async def test_empty_queue_plays_one_tool_round_trip(provider: OpenAIResponsesProvider) -> None:
    first = await _ask(provider, HELLO)
    [call] = first.message.tool_calls
    result = Message(role="tool", tool_call_id=call.id, name="lookup", content="sunny")

    second = await _ask(provider, [*HELLO, first.message, result])
    third = await provider.complete("gpt-test", "", HELLO, [])

    assert (call.name, call.arguments) == ("lookup", "{}")
    assert second.message.content == "Received 1 tool result (lookup)."
    assert third.message.content == "ok"
