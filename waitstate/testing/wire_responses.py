"""What the wire server answers on OpenAI's Responses API (`POST /v1/responses`): the builders
of its bodies, its server-sent events, its error bodies, and its default rule for when nothing
is queued (`waitstate.testing.wire_server` says how replies are served; the other protocols'
are in `waitstate.testing.wire_replies`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Unpack

from waitstate.testing.wire_replies import (
    ErrorReply,
    OpenAIUsage,
    _pieces,
    answered_calls,
    openai_error_body,
    openai_usage,
    received_text,
)

RESPONSES_PATH = "/v1/responses"


@dataclass(frozen=True)
class ParamError(ErrorReply):
    """An error reply that names the request parameter at fault (the API's `error.param`)."""

    param: str | None = None


def responses_text(
    text: str, *, reasoning: str | None = None, **usage: Unpack[OpenAIUsage]
) -> dict[str, Any]:
    """Build a Responses body whose output is one assistant message of `text`.

    Args:
        text: The assistant's answer.
        reasoning: With it, a `reasoning` item comes first, whose `encrypted_content` it is.
        **usage: As `OpenAIUsage` says (reported as `usage.input_tokens`,
            `usage.output_tokens` and `usage.input_tokens_details.cached_tokens`).
    """
    return _body([*_reasoning(reasoning), _message(text)], usage)


def responses_function_calls(
    calls: Iterable[tuple[str, str, str]],
    *,
    text: str = "",
    reasoning: str | None = None,
    **usage: Unpack[OpenAIUsage],
) -> dict[str, Any]:
    """Build a Responses body that calls functions.

    Args:
        calls: `(call_id, name, arguments)` triples; `arguments` is sent as written, so it
            may be malformed JSON on purpose. Each item gets an `fc_` id of its own.
        text: With it, an assistant message comes before the calls.
        reasoning: With it, a `reasoning` item comes first, whose `encrypted_content` it is.
        **usage: As for `responses_text`.
    """
    output = [*_reasoning(reasoning), *([_message(text)] if text else [])]
    output += [
        {
            "type": "function_call",
            "id": f"fc_{uuid.uuid4().hex[:24]}",
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }
        for call_id, name, arguments in calls
    ]
    return _body(output, usage)


def param_error(status: int, message: str, param: str) -> ParamError:
    """Build an error reply naming the parameter at fault, e.g. what a model that does not
    reason answers to `include`: `param_error(400, "Encrypted content is not supported with
    this model.", "include")`."""
    return ParamError(status, message, {}, param)


def responses_error_body(reply: ErrorReply) -> dict[str, Any]:
    """The JSON body of an error reply, as the Responses API shapes it."""
    return openai_error_body(reply, reply.param if isinstance(reply, ParamError) else None)


def responses_error_event(reply: ErrorReply, sequence_number: int) -> dict[str, Any]:
    """The `error` event a stream ends with when the API meets an error while answering."""
    error = responses_error_body(reply)["error"]
    return {
        "type": "error",
        "code": error["code"] or error["type"],
        "message": error["message"],
        "param": error["param"],
        "sequence_number": sequence_number,
    }


def default_responses_reply(body: dict[str, Any]) -> dict[str, Any]:
    """Answer with the default rule (`waitstate.testing.wire_server` says it), over `input`
    items: function call outputs for the last items, a first function call, or "ok"."""
    raw = body.get("input")
    items = [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else []
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    called = {i.get("call_id"): i.get("name") for i in items if i.get("type") == "function_call"}
    answered = answered_calls(
        items, called, lambda i: i.get("type") == "function_call_output", "call_id"
    )
    if answered:
        return responses_text(received_text(answered))
    if tools and not called:
        name = str(tools[0].get("name", ""))
        return responses_function_calls([(f"call_{uuid.uuid4().hex[:24]}", name, "{}")])
    return responses_text("ok")


def responses_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses body as the events a streamed answer sends (`"stream": true`); each event's
    `type` is also its SSE `event:` name.

    As OpenAI streams: `response.created` and `response.in_progress` with the response and no
    output yet; each output item opened (`response.output_item.added`), a message's text in a
    few pieces (`response.output_text.delta`, between its content part's `added` and `done`)
    and a function call's arguments likewise (`response.function_call_arguments.delta`), each
    item closed whole (`response.output_item.done`); then `response.completed` with the
    response as the unstreamed answer gives it.
    """
    started = {**body, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(body["output"]):
        at = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "message":
            events.append(_added(index, {**item, "status": "in_progress", "content": []}))
            for part_index, part in enumerate(item["content"]):
                where = {**at, "content_index": part_index}
                events.append(
                    {
                        "type": "response.content_part.added",
                        **where,
                        "part": {**part, "text": ""},
                    }
                )
                events += [
                    {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
                    for piece in _pieces(part["text"])
                ]
                events.append(
                    {
                        "type": "response.output_text.done",
                        **where,
                        "text": part["text"],
                        "logprobs": [],
                    }
                )
                events.append({"type": "response.content_part.done", **where, "part": part})
        elif item["type"] == "function_call":
            events.append(_added(index, {**item, "status": "in_progress", "arguments": ""}))
            events += [
                {"type": "response.function_call_arguments.delta", **at, "delta": piece}
                for piece in _pieces(item["arguments"])
            ]
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    **at,
                    "name": item["name"],
                    "arguments": item["arguments"],
                }
            )
        else:
            events.append(_added(index, item))
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": body})
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def _added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def _reasoning(encrypted: str | None) -> list[dict[str, Any]]:
    if encrypted is None:
        return []
    item = {
        "type": "reasoning",
        "id": f"rs_{uuid.uuid4().hex[:24]}",
        "summary": [],
        "encrypted_content": encrypted,
    }
    return [item]


def _message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _body(output: list[dict[str, Any]], usage: OpenAIUsage) -> dict[str, Any]:
    input_tokens, output_tokens, cached_tokens, model = openai_usage(usage)
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "store": False,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }
