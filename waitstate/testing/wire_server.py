"""A local stand-in for the OpenAI and Anthropic HTTP APIs, for tests, benchmarks and demos.

It speaks just enough of two wire protocols for the real SDK clients to talk to it:

- `POST /v1/chat/completions`: OpenAI Chat Completions (non-streaming).
- `POST /v1/messages`: Anthropic Messages (non-streaming).

Each request is answered with the next scripted reply, first in first out: first from the
queue of the request's `model`, if one was given (`server.enqueue_for("m", ...)`, so
concurrent conversations each get their own script), then from the shared queue
(`server.enqueue(...)`). A reply may be `delayed(seconds, ...)`: the answer comes that much
later, e.g. to hang past a client's timeout; or `held(limit, ...)`: the answer comes once the
next request naming the same model arrives (the client's retry), an event rather than a
clock. When nothing is queued, a default rule answers instead:

1. if the request's last message carries tool results, a text reply saying how
   many results came back and from which tools;
2. otherwise, if tools were offered and no tool was called yet in the
   conversation, a call to the first offered tool with `{}` as arguments;
3. otherwise, the text reply "ok".

So an agent loop against an empty queue runs one tool round trip and finishes.

Usage::

    with WireServer() as server:
        server.enqueue(openai_text("hello"), error(429, "slow down", {"retry-after": "3"}))
        client = openai.AsyncOpenAI(api_key="test", base_url=server.openai_base_url)

Or by hand: `python -m waitstate.testing.wire_server --port 8765`, then point
`OPENAI_BASE_URL=http://127.0.0.1:8765/v1` or `ANTHROPIC_BASE_URL=http://127.0.0.1:8765`
at it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

logger = logging.getLogger(__name__)

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"

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


Reply: TypeAlias = dict[str, Any] | ErrorReply | DelayedReply | HeldReply
"""A scripted reply: a response body answered with 200, an `ErrorReply`, a `DelayedReply` or a
`HeldReply`."""


@dataclass(frozen=True)
class RecordedRequest:
    """A request the server received."""

    path: str
    headers: dict[str, str]
    body: Any
    # time.monotonic() when the request was read, and just before its answer was written (so a
    # client cannot have seen the answer earlier): e.g. to check a retry-after was honoured.
    received_at: float = field(default_factory=time.monotonic)
    answered_at: float | None = None


def openai_text(
    text: str, *, input_tokens: int = 10, output_tokens: int = 5, model: str | None = None
) -> dict[str, Any]:
    """Build a Chat Completions body whose message is `text`.

    Args:
        text: The assistant's answer.
        input_tokens: Reported as `usage.prompt_tokens`.
        output_tokens: Reported as `usage.completion_tokens`.
        model: The answering model; None echoes the request's model.
    """
    message = {"role": "assistant", "content": text, "refusal": None}
    return _openai_body(message, "stop", input_tokens, output_tokens, model)


def openai_tool_calls(
    calls: Iterable[tuple[str, str, str]],
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    model: str | None = None,
) -> dict[str, Any]:
    """Build a Chat Completions body that calls tools.

    Args:
        calls: `(call_id, name, arguments)` triples; `arguments` is sent as written,
            so it may be malformed JSON on purpose.
        input_tokens: Reported as `usage.prompt_tokens`.
        output_tokens: Reported as `usage.completion_tokens`.
        model: The answering model; None echoes the request's model.
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
    return _openai_body(message, "tool_calls", input_tokens, output_tokens, model)


def anthropic_text(
    text: str, *, input_tokens: int = 10, output_tokens: int = 5, model: str | None = None
) -> dict[str, Any]:
    """Build a Messages body whose content is one text block.

    Args:
        text: The assistant's answer.
        input_tokens: Reported as `usage.input_tokens`.
        output_tokens: Reported as `usage.output_tokens`.
        model: The answering model; None echoes the request's model.
    """
    content = [{"type": "text", "text": text}]
    return _anthropic_body(content, "end_turn", input_tokens, output_tokens, model)


def anthropic_tool_use(
    calls: Iterable[tuple[str, str, dict[str, Any]]],
    *,
    text: str = "",
    input_tokens: int = 10,
    output_tokens: int = 5,
    model: str | None = None,
) -> dict[str, Any]:
    """Build a Messages body that calls tools.

    Args:
        calls: `(tool_use_id, name, input)` triples.
        text: Optional text block sent before the tool_use blocks.
        input_tokens: Reported as `usage.input_tokens`.
        output_tokens: Reported as `usage.output_tokens`.
        model: The answering model; None echoes the request's model.
    """
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
        for call_id, name, tool_input in calls
    ]
    return _anthropic_body(content, "tool_use", input_tokens, output_tokens, model)


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


class WireServer:
    """An HTTP server on 127.0.0.1, serving scripted replies from a daemon thread.

    It starts serving on construction; use it as a context manager or call `close()`.
    """

    def __init__(self, port: int = 0) -> None:
        """Bind 127.0.0.1 on `port` (0 picks a free one) and start serving."""
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self._by_model: dict[str, deque[Reply]] = {}
        self._held: dict[str | None, list[HeldReply]] = {}
        self._requests: list[RecordedRequest] = []
        self._http = _HTTPServer(("127.0.0.1", port), _Handler)
        self._http.wire = self
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            # `close()` waits up to one poll interval; the default 0.5 s adds up across tests.
            kwargs={"poll_interval": 0.05},
            name=f"wire-server-{self.port}",
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        """The server's root, e.g. `http://127.0.0.1:8765`."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """The `base_url` for `openai.AsyncOpenAI` (the root plus `/v1`)."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The `base_url` for `anthropic.AsyncAnthropic`, which appends `/v1/messages` itself."""
        return self.url

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def enqueue(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self._replies.extend(replies)

    def enqueue_for(self, model: str, *replies: Reply) -> None:
        """Queue replies for the next requests naming `model`, in order, ahead of the shared
        queue: concurrent conversations on distinct model names keep their own scripts."""
        with self._lock:
            self._by_model.setdefault(model, deque()).extend(replies)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _answered(self, request: RecordedRequest) -> None:
        """Stamp the request's entry as answered now (entries are immutable: replaced)."""
        with self._lock:
            for index in range(len(self._requests) - 1, -1, -1):
                if self._requests[index] is request:
                    self._requests[index] = replace(request, answered_at=time.monotonic())
                    return

    def _record_and_pop(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            self._requests.append(request)
            model = request.body.get("model") if isinstance(request.body, dict) else None
            model = model if isinstance(model, str) else None
            # A later request naming the model: the replies held for it answer now.
            for waiting in self._held.pop(model, []):
                waiting.release.set()
            queue = self._by_model.get(model) if model is not None else None
            if not queue:
                queue = self._replies
            reply = queue.popleft() if queue else None
            if isinstance(reply, HeldReply):
                self._held.setdefault(model, []).append(reply)
            return reply


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    wire: WireServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away (a killed worker's keep-alive connection) is no error of
        # ours; anything else is printed as the base class does.
        if isinstance(sys.exc_info()[1], ConnectionError):
            logger.debug("client %s went away", client_address)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps connections alive across calls, as with the real APIs.
    protocol_version = "HTTP/1.1"
    # Let an idle keep-alive connection's thread end on its own.
    timeout = 60
    server: _HTTPServer

    def do_POST(self) -> None:
        # Read the body even when refusing the request, or it would be parsed as the
        # next request on this keep-alive connection.
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        protocol: WireProtocol
        if self.path == OPENAI_PATH:
            protocol = "openai"
        elif self.path == ANTHROPIC_PATH:
            protocol = "anthropic"
        else:
            self._send_json(404, {"error": {"message": f"no route for POST {self.path}"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send_error(protocol, ErrorReply(400, "request body is not a JSON object"))
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        request = RecordedRequest(self.path, headers, body)
        queued = self.server.wire._record_and_pop(request)
        reply: dict[str, Any] | ErrorReply | None
        if isinstance(queued, DelayedReply):
            time.sleep(queued.seconds)  # this request's own thread: the others go on
            reply = queued.reply
        elif isinstance(queued, HeldReply):
            queued.release.wait(queued.limit)  # likewise
            reply = queued.reply
        else:
            reply = queued
        if reply is None:
            reply = _default_reply(protocol, body)
        self.server.wire._answered(request)
        if isinstance(reply, ErrorReply):
            self._send_error(protocol, reply)
        else:
            if reply.get("model") is None:
                reply = {**reply, "model": body.get("model", "wire-server")}
            self._send_json(200, reply)

    def _send_error(self, protocol: WireProtocol, reply: ErrorReply) -> None:
        if protocol == "openai":
            kind = "server_error" if reply.status >= 500 else "invalid_request_error"
            code = "rate_limit_exceeded" if reply.status == 429 else None
            body: dict[str, Any] = {
                "error": {"message": reply.message, "type": kind, "param": None, "code": code}
            }
        else:
            kind = _ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
            body = {"type": "error", "error": {"type": kind, "message": reply.message}}
        self._send_json(reply.status, body, reply.headers)

    def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up first (a delayed reply past its timeout): nobody to answer.
            logger.debug("client hung up before the answer to %s", self.path)

    def log_message(self, format: str, *args: Any) -> None:
        # The base class writes every request to stderr; keep that out of test output.
        logger.debug("%s " + format, self.address_string(), *args)


def _default_reply(protocol: WireProtocol, body: dict[str, Any]) -> dict[str, Any]:
    """Answer with the rule in the module docstring."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    if protocol == "openai":
        return _default_openai_reply(messages, tools)
    return _default_anthropic_reply(messages, tools)


def _default_openai_reply(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    called = {
        call.get("id"): call.get("function", {}).get("name")
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    }
    answered = []
    for m in reversed(messages):
        if m.get("role") != "tool":
            break
        answered.append(called.get(m.get("tool_call_id")) or "unknown tool")
    if answered:
        return openai_text(_received_text(reversed(answered)))
    if tools and not called:
        name = tools[0].get("function", {}).get("name", "")
        return openai_tool_calls([(f"call_{uuid.uuid4().hex[:24]}", name, "{}")])
    return openai_text("ok")


def _default_anthropic_reply(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
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
        return anthropic_text(_received_text(answered))
    if tools and not called:
        name = tools[0].get("name", "")
        return anthropic_tool_use([(f"toolu_{uuid.uuid4().hex[:24]}", name, {})])
    return anthropic_text("ok")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _received_text(tool_names: Iterable[str]) -> str:
    names = list(tool_names)
    plural = "" if len(names) == 1 else "s"
    return f"Received {len(names)} tool result{plural} ({', '.join(names)})."


def _openai_body(
    message: dict[str, Any],
    finish_reason: str,
    input_tokens: int,
    output_tokens: int,
    model: str | None,
) -> dict[str, Any]:
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
        },
    }


def _anthropic_body(
    content: list[dict[str, Any]],
    stop_reason: str,
    input_tokens: int,
    output_tokens: int,
    model: str | None,
) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def main() -> None:
    """Serve in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(message)s")
    with WireServer(args.port) as server:
        print(f"Serving on {server.url} (Ctrl-C to stop)")
        print(f"  export OPENAI_BASE_URL={server.openai_base_url} OPENAI_API_KEY=test")
        print(f"  export ANTHROPIC_BASE_URL={server.anthropic_base_url} ANTHROPIC_API_KEY=test")
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
