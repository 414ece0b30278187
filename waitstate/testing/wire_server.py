"""A local stand-in for the OpenAI and Anthropic HTTP APIs, for tests, benchmarks and demos.

It speaks just enough of two wire protocols for the real SDK clients to talk to it:

- `POST /v1/chat/completions`: OpenAI Chat Completions; with `"stream": true`, the reply
  comes as OpenAI's server-sent chunks (`wire_replies.openai_chunks`), ending `data: [DONE]`.
- `POST /v1/messages`: Anthropic Messages; with `"stream": true`, the reply comes as
  Anthropic's server-sent events (`wire_replies.anthropic_events`), ending `message_stop`.
- `POST /v1/responses`: OpenAI Responses; with `"stream": true`, the reply comes as its
  server-sent events (`wire_responses.responses_events`), ending `response.completed`; with
  `"background": true`, it is answered `queued`, and `GET /v1/responses/{id}` and
  `POST /v1/responses/{id}/cancel` follow it (`waitstate.testing.wire_background`).

Each request is answered with the next scripted reply, first in first out: first from the
queue of the request's `model`, if one was given (`server.enqueue_for("m", ...)`, so
concurrent conversations each get their own script), then from the shared queue
(`server.enqueue(...)`). A reply may be `delayed(seconds, ...)`: the answer comes that much
later, e.g. to hang past a client's timeout; or `held(limit, ...)`: the answer comes once the
next request naming the same model arrives (the client's retry), an event rather than a
clock. A streamed reply may break: `broken_off(events, ...)` drops the connection after that
many events, `error_event(events, status, message, ...)` ends the stream with an error event
there. When nothing is queued, a default rule answers instead:

1. if the request's last message carries tool results (Responses: its last input items are
   function call outputs), a text reply saying how many results came back and from which
   tools;
2. otherwise, if tools were offered and no tool was called yet in the
   conversation, a call to the first offered tool with `{}` as arguments;
3. otherwise, the text reply "ok".

So an agent loop against an empty queue runs one tool round trip and finishes (over Anthropic's
protocol, a request with thinking on gets replies that thought). An Anthropic request with
thinking on is refused (400) as Anthropic refuses it when the thinking blocks this server sent
with its tool calls do not come back unchanged (`waitstate.testing.wire_thinking`). With
`WireServer(prompt_cache=True)` (`--prompt-cache`), it simulates the providers' prompt caches:
the prefixes it has seen are remembered, and each answer's usage says how much of the request's
input was read from (and, for Anthropic, written to) the cache (`waitstate.testing.wire_cache`).
The replies,
their builders and the default rule are in `waitstate.testing.wire_replies` (the Responses
API's in `waitstate.testing.wire_responses`); each is imported from here too.

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
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

from waitstate.testing.wire_background import BackgroundResponses, response_id
from waitstate.testing.wire_cache import CacheUse, PromptCache
from waitstate.testing.wire_replies import (
    BrokenStream,
    DelayedReply,
    ErrorReply,
    HeldReply,
    Reply,
    WireProtocol,
    anthropic_events,
    anthropic_text,
    anthropic_tool_use,
    broken_off,
    default_reply,
    delayed,
    error,
    error_body,
    error_event,
    held,
    openai_chunks,
    openai_text,
    openai_tool_calls,
)
from waitstate.testing.wire_responses import (
    RESPONSES_PATH,
    ParamError,
    default_responses_reply,
    param_error,
    responses_error_body,
    responses_error_event,
    responses_events,
    responses_function_calls,
    responses_text,
)
from waitstate.testing.wire_thinking import sent_with_calls, thinking_problem

__all__ = [
    "ANTHROPIC_PATH",
    "OPENAI_PATH",
    "RESPONSES_PATH",
    "BrokenStream",
    "DelayedReply",
    "ErrorReply",
    "HeldReply",
    "ParamError",
    "RecordedRequest",
    "Reply",
    "WireProtocol",
    "WireServer",
    "anthropic_events",
    "anthropic_text",
    "anthropic_tool_use",
    "broken_off",
    "delayed",
    "error",
    "error_event",
    "held",
    "openai_chunks",
    "openai_text",
    "openai_tool_calls",
    "param_error",
    "responses_events",
    "responses_function_calls",
    "responses_text",
]

logger = logging.getLogger(__name__)

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
# The protocols served: the Responses API's replies are built in a module of their own.
Protocol: TypeAlias = WireProtocol | Literal["openai-responses"]


@dataclass(frozen=True)
class RecordedRequest:
    """A request the server received."""

    path: str
    headers: dict[str, str]
    body: Any  # None for a GET
    # time.monotonic() when the request was read, and just before its answer was written (so a
    # client cannot have seen the answer earlier): e.g. to check a retry-after was honoured.
    received_at: float = field(default_factory=time.monotonic)
    answered_at: float | None = None
    method: str = "POST"


class WireServer:
    """An HTTP server on 127.0.0.1, serving scripted replies from a daemon thread.

    It starts serving on construction; use it as a context manager or call `close()`.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        prompt_cache: bool = False,
        cache_min_tokens: int = 0,
        background_seconds: float = 1.0,
    ) -> None:
        """Bind 127.0.0.1 on `port` (0 picks a free one) and start serving.

        With `prompt_cache`, the server simulates the providers' prompt caches
        (`waitstate.testing.wire_cache`): every answer's usage then reports the request's input
        as estimated (characters / 4), and of it what the cache served and took, whatever the
        scripted reply said of its input; prefixes under `cache_min_tokens` are not cached.
        A background response completes `background_seconds` after its create
        (`self.background.seconds`, which a test may change).
        """
        self.prompt_cache = PromptCache(cache_min_tokens) if prompt_cache else None
        self.background = BackgroundResponses(background_seconds)
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self._by_model: dict[str, deque[Reply]] = {}
        self._held: dict[str | None, list[HeldReply]] = {}
        # The thinking blocks sent with each Anthropic tool call, by its id.
        self._thought: dict[str, list[dict[str, Any]]] = {}
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

    def _thinking_problem(self, body: dict[str, Any]) -> str | None:
        with self._lock:
            return thinking_problem(body, self._thought)

    def _sent(self, reply: dict[str, Any]) -> None:
        """Remember the thinking an Anthropic reply sends with its tool calls."""
        with self._lock:
            self._thought.update(sent_with_calls(reply))

    def _record(self, request: RecordedRequest) -> None:
        """Record a request refused before any reply is taken for it."""
        with self._lock:
            self._requests.append(request)

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

    def do_GET(self) -> None:
        named = response_id(self.path)
        if named is None or named[1]:
            self._send_json(404, {"error": {"message": f"no route for GET {self.path}"}})
            return
        self._background(named[0], cancel=False, method="GET")

    def do_POST(self) -> None:
        # Read the body even when refusing the request, or it would be parsed as the
        # next request on this keep-alive connection.
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        protocol: Protocol
        named = response_id(self.path)
        if named is not None and named[1]:
            self._background(named[0], cancel=True, method="POST")
            return
        if self.path == OPENAI_PATH:
            protocol = "openai"
        elif self.path == ANTHROPIC_PATH:
            protocol = "anthropic"
        elif self.path == RESPONSES_PATH:
            protocol = "openai-responses"
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
        if protocol == "anthropic" and (problem := self.server.wire._thinking_problem(body)):
            # Refused before any scripted reply is taken, as Anthropic refuses it.
            self.server.wire._record(request)
            self._send_error(protocol, ErrorReply(400, problem))
            return
        queued = self.server.wire._record_and_pop(request)
        reply: dict[str, Any] | ErrorReply | None
        broken: BrokenStream | None = None
        if isinstance(queued, DelayedReply):
            time.sleep(queued.seconds)  # this request's own thread: the others go on
            reply = queued.reply
        elif isinstance(queued, HeldReply):
            queued.release.wait(queued.limit)  # likewise
            reply = queued.reply
        elif isinstance(queued, BrokenStream):
            broken, reply = queued, queued.reply
        else:
            reply = queued
        if reply is None:
            if protocol == "openai-responses":
                reply = default_responses_reply(body)
            else:
                reply = default_reply(protocol, body)
        self.server.wire._answered(request)
        streamed = body.get("stream") is True
        if isinstance(reply, ErrorReply):
            self._send_error(protocol, reply)
        elif broken is not None and not streamed:
            if broken.error is not None:
                self._send_error(protocol, broken.error)
            else:
                self.close_connection = True  # no answer at all
        else:
            if reply.get("model") is None:
                reply = {**reply, "model": body.get("model", "wire-server")}
            if (cache := self.server.wire.prompt_cache) is not None:
                reply = _with_usage(protocol, reply, cache.use(protocol, body))
            if protocol == "openai-responses" and body.get("background") is True and not streamed:
                reply = self.server.wire.background.start(reply)
            if protocol == "anthropic":
                self.server.wire._sent(reply)
            if streamed:
                self._stream(protocol, body, reply, broken)
            else:
                self._send_json(200, reply)

    def _background(self, name: str, *, cancel: bool, method: str) -> None:
        """Retrieve or cancel the background response `name`."""
        headers = {key.lower(): value for key, value in self.headers.items()}
        self.server.wire._record(RecordedRequest(self.path, headers, None, method=method))
        background = self.server.wire.background
        body = background.cancel(name) if cancel else background.retrieve(name)
        if body is None:
            reply = ErrorReply(404, f"No response found with id '{name}'.")
            self._send_error("openai-responses", reply)
        else:
            self._send_json(200, body)

    def _send_error(self, protocol: Protocol, reply: ErrorReply) -> None:
        self._send_json(reply.status, _error_body(protocol, reply), reply.headers)

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

    def _stream(
        self,
        protocol: Protocol,
        body: dict[str, Any],
        reply: dict[str, Any],
        broken: BrokenStream | None,
    ) -> None:
        """Send `reply` as the protocol's server-sent events: OpenAI's chunks then
        `data: [DONE]`, or Anthropic's or the Responses API's named events; a `broken` one
        stops early."""
        if protocol == "openai-responses":
            events = [_sse(event, event["type"]) for event in responses_events(reply)]
        elif protocol == "openai":
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            events = [_sse(chunk) for chunk in openai_chunks(reply, include_usage=usage)]
            events.append("data: [DONE]\n\n")
        else:
            events = [_sse(event, event["type"]) for event in anthropic_events(reply)]
        if broken is None:
            self._send_events(events)
        elif broken.error is None:
            self._send_events(events[: broken.events], drop=True)
        elif protocol == "openai-responses":
            # The Responses API sends it as an `error` event, numbered in the sequence.
            error = responses_error_event(broken.error, broken.events)
            self._send_events([*events[: broken.events], _sse(error, "error")])
        else:
            # OpenAI sends it as a chunk of its own, Anthropic as an `error` event.
            name = "error" if protocol == "anthropic" else None
            failure = _sse(_error_body(protocol, broken.error), name)
            self._send_events([*events[: broken.events], failure])

    def _send_events(self, events: list[str], *, drop: bool = False) -> None:
        """Stream server-sent `events`, each written as it would come from the API (HTTP
        chunked encoding, flushed one by one); with `drop`, the connection is then dropped
        with the body unfinished, as when a stream breaks off."""
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for event in events:
                data = event.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            if drop:
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            logger.debug("client hung up during the stream of %s", self.path)

    def log_message(self, format: str, *args: Any) -> None:
        # The base class writes every request to stderr; keep that out of test output.
        logger.debug("%s " + format, self.address_string(), *args)


def _with_usage(protocol: Protocol, reply: dict[str, Any], used: CacheUse) -> dict[str, Any]:
    """`reply` with the input usage of a request the prompt cache served as `used` said."""
    usage = dict(reply.get("usage") or {})
    if protocol == "anthropic":
        usage["input_tokens"] = used.total - used.read - used.written
        usage["cache_read_input_tokens"] = used.read
        usage["cache_creation_input_tokens"] = used.written
    elif protocol == "openai":
        usage["prompt_tokens"] = used.total
        usage["total_tokens"] = used.total + usage.get("completion_tokens", 0)
        usage["prompt_tokens_details"] = {"cached_tokens": used.read, "audio_tokens": 0}
    else:
        usage["input_tokens"] = used.total
        usage["total_tokens"] = used.total + usage.get("output_tokens", 0)
        usage["input_tokens_details"] = {"cached_tokens": used.read, "cache_write_tokens": 0}
    return {**reply, "usage": usage}


def _error_body(protocol: Protocol, reply: ErrorReply) -> dict[str, Any]:
    if protocol == "openai-responses":
        return responses_error_body(reply)
    return error_body(protocol, reply)


def _sse(data: Any, name: str | None = None) -> str:
    """One server-sent event: its `event:` line when it has a name, and `data` as JSON."""
    line = f"event: {name}\n" if name is not None else ""
    return f"{line}data: {json.dumps(data)}\n\n"


def main() -> None:
    """Serve in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument(
        "--prompt-cache", action="store_true", help="simulate the providers' prompt caches"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(message)s")
    with WireServer(args.port, prompt_cache=args.prompt_cache) as server:
        print(f"Serving on {server.url} (Ctrl-C to stop)")
        print(f"  export OPENAI_BASE_URL={server.openai_base_url} OPENAI_API_KEY=test")
        print(f"  export ANTHROPIC_BASE_URL={server.anthropic_base_url} ANTHROPIC_API_KEY=test")
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
