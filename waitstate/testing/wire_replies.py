"""What the wire server answers: scripted replies (bodies, errors, delayed and held replies),
the builders of OpenAI and Anthropic bodies, and the default rule for when nothing is queued
(`waitstate.testing.wire_server` says how they are served)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypedDict, Unpack

from waitstate.testing.wire_thinking import thinking_blocks, thinks

WireProtocol = Literal["openai", "anthropic"]

# Anthropic's documented error `type`s; anything unlisted gets the generic one.
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class ErrorReply:
    """A scripted failure: the status, message and headers to answer with.

    The JSON body is shaped at answer time for the protocol the request used.
    """

    status: int
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DelayedReply:
    """A reply sent `seconds` late: `reply`, or the default rule's answer when None."""

    seconds: float
    reply: dict[str, Any] | ErrorReply | None = None


@dataclass(frozen=True)
class HeldReply:
    """A reply held until the next request naming the same model arrives, or `limit` seconds
    have passed: then `reply`, or the default rule's answer when None."""

    limit: float
    reply: dict[str, Any] | ErrorReply | None = None
    # Set by the server when that next request arrives; one per reply, which is answered once.
    release: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


@dataclass(frozen=True)
class BrokenStream:
    """A streamed answer that fails after its first `events` events: the connection is dropped
    there, or with `error`, that error is sent as the stream's last event (as a provider reports
    one it meets while answering). `reply` is the answer streamed (None: the default rule's).

    A request that is not streamed gets `error` as its answer, or no answer at all (the
    connection is dropped).
    """

    events: int
    error: ErrorReply | None = None
    reply: dict[str, Any] | None = None


Reply: TypeAlias = dict[str, Any] | ErrorReply | DelayedReply | HeldReply | BrokenStream
"""A scripted reply: a response body answered with 200, an `ErrorReply`, a `DelayedReply`, a
`HeldReply` or a `BrokenStream`."""


class OpenAIUsage(TypedDict, total=False):
    """The keywords every OpenAI body builder takes (Chat Completions' here, the Responses
    API's in `waitstate.testing.wire_responses`): what the body reports, and who answered.

    Keys:
        input_tokens: Reported as the input tokens (default 10).
        output_tokens: Reported as the output tokens (default 5).
        cached_tokens: Reported as the cached tokens of the input (default 0).
        model: The answering model; None (the default) echoes the request's model.
    """

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    model: str | None


class AnthropicOptions(TypedDict, total=False):
    """The keywords every Messages body builder takes: its thinking, what it reports, and who
    answered.

    Keys:
        thinking: With it, a thinking block of this text comes first, signed
            (`waitstate.testing.wire_thinking`).
        redacted_thinking: With it, a redacted_thinking block whose data holds it comes next.
        input_tokens: Reported as `usage.input_tokens` (default 10; as Anthropic counts them:
            the input neither read from nor written to the cache).
        output_tokens: Reported as `usage.output_tokens` (default 5).
        cache_read_tokens: Reported as `usage.cache_read_input_tokens` (default 0).
        cache_write_tokens: Reported as `usage.cache_creation_input_tokens` (default 0).
        model: The answering model; None (the default) echoes the request's model.
    """

    thinking: str | None
    redacted_thinking: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    model: str | None


def openai_text(text: str, **usage: Unpack[OpenAIUsage]) -> dict[str, Any]:
    """Build a Chat Completions body whose message is `text`.

    Args:
        text: The assistant's answer.
        **usage: As `OpenAIUsage` says (reported as `usage.prompt_tokens`,
            `usage.completion_tokens` and `usage.prompt_tokens_details.cached_tokens`).
    """
    message = {"role": "assistant", "content": text, "refusal": None}
    return _openai_body(message, "stop", usage)


def openai_tool_calls(
    calls: Iterable[tuple[str, str, str]], **usage: Unpack[OpenAIUsage]
) -> dict[str, Any]:
    """Build a Chat Completions body that calls tools.

    Args:
        calls: `(call_id, name, arguments)` triples; `arguments` is sent as written,
            so it may be malformed JSON on purpose.
        **usage: As for `openai_text`.
    """
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in calls
        ],
    }
    return _openai_body(message, "tool_calls", usage)


def anthropic_text(text: str, **options: Unpack[AnthropicOptions]) -> dict[str, Any]:
    """Build a Messages body whose content is one text block.

    Args:
        text: The assistant's answer.
        **options: As `AnthropicOptions` says.
    """
    return _anthropic_body([{"type": "text", "text": text}], "end_turn", options)


def anthropic_tool_use(
    calls: Iterable[tuple[str, str, dict[str, Any]]],
    *,
    text: str = "",
    **options: Unpack[AnthropicOptions],
) -> dict[str, Any]:
    """Build a Messages body that calls tools.

    Args:
        calls: `(tool_use_id, name, input)` triples.
        text: Optional text block sent before the tool_use blocks.
        **options: As `AnthropicOptions` says; with `thinking`, the server refuses a request
            with thinking on that brings these calls' results back without it
            (`waitstate.testing.wire_thinking`).
    """
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
        for call_id, name, tool_input in calls
    ]
    return _anthropic_body(content, "tool_use", options)


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> ErrorReply:
    """Build an error reply, e.g. `error(429, "slow down", {"retry-after": "3"})`."""
    return ErrorReply(status, message, dict(headers or {}))


def delayed(seconds: float, reply: dict[str, Any] | ErrorReply | None = None) -> DelayedReply:
    """Build a reply that answers `seconds` late (None: with the default rule's answer)."""
    return DelayedReply(seconds, reply)


def held(limit: float, reply: dict[str, Any] | ErrorReply | None = None) -> HeldReply:
    """Build a reply that answers once the next request naming the same model arrives (e.g.
    the client's retry after its timeout), or after `limit` seconds if none does (None: with
    the default rule's answer)."""
    return HeldReply(limit, reply)


def broken_off(events: int, reply: dict[str, Any] | None = None) -> BrokenStream:
    """Build a streamed answer whose connection drops after its first `events` events (None:
    the default rule's answer)."""
    return BrokenStream(events, None, reply)


def error_event(
    events: int, status: int, message: str, reply: dict[str, Any] | None = None
) -> BrokenStream:
    """Build a streamed answer that ends after its first `events` events with an error event,
    e.g. `error_event(3, 529, "Overloaded")` (`status` picks the error's type, as for `error`)."""
    return BrokenStream(events, ErrorReply(status, message), reply)


def error_body(protocol: WireProtocol, reply: ErrorReply) -> dict[str, Any]:
    """The JSON body of an error reply, in the shape of the request's protocol."""
    if protocol == "openai":
        return openai_error_body(reply)
    kind = _ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": reply.message}}


def openai_error_body(reply: ErrorReply, param: str | None = None) -> dict[str, Any]:
    """The JSON body of an error reply, as OpenAI's APIs shape it (`param`: the request
    parameter at fault, if the reply names one)."""
    kind = "server_error" if reply.status >= 500 else "invalid_request_error"
    code = "rate_limit_exceeded" if reply.status == 429 else None
    return {"error": {"message": reply.message, "type": kind, "param": param, "code": code}}


def default_reply(protocol: WireProtocol, body: dict[str, Any]) -> dict[str, Any]:
    """Answer with the default rule (`waitstate.testing.wire_server` says it)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    if protocol == "openai":
        return _default_openai_reply(messages, tools)
    # A request that thinks gets a reply that thought.
    thought = "Thinking it over." if thinks(body) else None
    return _default_anthropic_reply(messages, tools, thought)


def _default_openai_reply(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    called = {
        call.get("id"): call.get("function", {}).get("name")
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    }
    answered = answered_calls(messages, called, lambda m: m.get("role") == "tool", "tool_call_id")
    if answered:
        return openai_text(received_text(answered))
    if tools and not called:
        name = tools[0].get("function", {}).get("name", "")
        return openai_tool_calls([(f"call_{uuid.uuid4().hex[:24]}", name, "{}")])
    return openai_text("ok")


def _default_anthropic_reply(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], thinking: str | None
) -> dict[str, Any]:
    called = {
        block.get("id"): block.get("name")
        for m in messages
        if m.get("role") == "assistant"
        for block in _blocks(m)
        if block.get("type") == "tool_use"
    }
    last = messages[-1] if messages else {}
    answered = [
        called.get(block.get("tool_use_id")) or "unknown tool"
        for block in _blocks(last)
        if block.get("type") == "tool_result"
    ]
    if answered:
        return anthropic_text(received_text(answered), thinking=thinking)
    if tools and not called:
        name = tools[0].get("name", "")
        call_id = f"toolu_{uuid.uuid4().hex[:24]}"
        return anthropic_tool_use([(call_id, name, {})], thinking=thinking)
    return anthropic_text("ok", thinking=thinking)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def answered_calls(
    items: list[dict[str, Any]],
    called: Mapping[Any, Any],
    is_result: Callable[[dict[str, Any]], bool],
    call_key: str,
) -> list[str]:
    """The names of the calls the results at the end of `items` answer, in order: each result's
    call, found under `call_key`, named by `called` ("unknown tool" if it has no name)."""
    answered = []
    for item in reversed(items):
        if not is_result(item):
            break
        answered.append(called.get(item.get(call_key)) or "unknown tool")
    return answered[::-1]


def received_text(tool_names: Iterable[str]) -> str:
    """What the default rule answers to the results of the tools `tool_names`."""
    names = list(tool_names)
    plural = "" if len(names) == 1 else "s"
    return f"Received {len(names)} tool result{plural} ({', '.join(names)})."


def _openai_body(message: dict[str, Any], finish_reason: str, usage: OpenAIUsage) -> dict[str, Any]:
    input_tokens, output_tokens, cached_tokens, model = openai_usage(usage)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
        },
    }


def openai_usage(usage: OpenAIUsage) -> tuple[int, int, int, str | None]:
    """`usage`'s input, output and cached tokens and model, defaults filled in."""
    return (
        usage.get("input_tokens", 10),
        usage.get("output_tokens", 5),
        usage.get("cached_tokens", 0),
        usage.get("model"),
    )


def _anthropic_body(
    content: list[dict[str, Any]], stop_reason: str, options: AnthropicOptions
) -> dict[str, Any]:
    thought = thinking_blocks(options.get("thinking"), options.get("redacted_thinking"))
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "content": [*thought, *content],
        "model": options.get("model"),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": options.get("input_tokens", 10),
            "output_tokens": options.get("output_tokens", 5),
            "cache_read_input_tokens": options.get("cache_read_tokens", 0),
            "cache_creation_input_tokens": options.get("cache_write_tokens", 0),
        },
    }


def openai_chunks(body: dict[str, Any], *, include_usage: bool = False) -> list[dict[str, Any]]:
    """A Chat Completions body as the chunks a streamed answer sends (`"stream": true`).

    As OpenAI streams: a first chunk with the role, the text in a few pieces, each tool call
    opened with its index, id and name and then its arguments in pieces, a last chunk with the
    finish reason and, when the request asked (`stream_options.include_usage`), a chunk with
    no choices and the usage (the others then carry `"usage": null`).
    """
    choice = body["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "", "refusal": None}]
    deltas += [{"content": piece} for piece in _pieces(message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        deltas.append(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            for piece in _pieces(function["arguments"])
        ]
    common = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body["created"],
        "model": body["model"],
    }
    usage: dict[str, Any] = {"usage": None} if include_usage else {}
    chunks = [
        {
            **common,
            "choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}],
            **usage,
        }
        for delta in deltas
    ]
    last = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"], "logprobs": None}
    chunks.append({**common, "choices": [last], **usage})
    if include_usage:
        chunks.append({**common, "choices": [], "usage": body.get("usage")})
    return chunks


def anthropic_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Messages body as the events a streamed answer sends (`"stream": true`); each event's
    `type` is also its SSE `event:` name.

    As Anthropic streams: `message_start` with the message, no content yet and the input tokens;
    each content block opened (`content_block_start`, a `ping` after the first), its text or
    its tool input's JSON in a few pieces (`content_block_delta`: `text_delta`, or
    `input_json_delta` starting with an empty piece; a thinking block's text as `thinking_delta`
    pieces then its signature as one `signature_delta`; a redacted_thinking block comes whole
    when opened) and closed (`content_block_stop`); then
    `message_delta` with the stop reason and the output tokens, and `message_stop`. A tool
    input given as a string is streamed as written, so it may be malformed JSON on purpose.
    """
    usage = body["usage"]
    # The output tokens so far: the real API counts a token or so here, the total comes last.
    start_usage = {**usage, "output_tokens": 1}
    message = {**body, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "usage": start_usage}}
    ]
    for index, block in enumerate(body["content"]):
        delta: list[dict[str, Any]]
        if block["type"] == "text":
            opened = {**block, "text": ""}
            delta = [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
        elif block["type"] == "thinking":
            opened = {**block, "thinking": "", "signature": ""}
            pieces = _pieces(block["thinking"])
            delta = [{"type": "thinking_delta", "thinking": piece} for piece in pieces]
            delta.append({"type": "signature_delta", "signature": block["signature"]})
        elif block["type"] == "redacted_thinking":
            opened, delta = block, []  # it comes whole
        else:
            tool_input = block["input"]
            if isinstance(tool_input, str):
                written = tool_input
            else:  # an empty input comes as the empty piece alone, as from the API
                written = json.dumps(tool_input) if tool_input else ""
            opened = {**block, "input": {}}
            pieces = ["", *_pieces(written)]
            delta = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
        events.append({"type": "content_block_start", "index": index, "content_block": opened})
        if index == 0:
            events.append({"type": "ping"})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in delta]
        events.append({"type": "content_block_stop", "index": index})
    stop = {"stop_reason": body["stop_reason"], "stop_sequence": body.get("stop_sequence")}
    events.append(
        {"type": "message_delta", "delta": stop, "usage": {"output_tokens": usage["output_tokens"]}}
    )
    events.append({"type": "message_stop"})
    return events


def _pieces(text: str, count: int = 4) -> list[str]:
    """`text` cut into at most `count` pieces of about equal length (none if it is empty)."""
    size = max(1, -(-len(text) // count))
    return [text[start : start + size] for start in range(0, len(text), size)]
