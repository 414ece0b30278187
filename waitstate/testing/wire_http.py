"""The wire server's HTTP side: each request read, recorded, and answered with the reply the
server (`waitstate.testing.wire_server.WireServer`) hands it, as JSON or as the protocol's
server-sent events, broken off or delayed as the reply says.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from waitstate.testing.wire_background import response_id
from waitstate.testing.wire_cache import CacheUse
from waitstate.testing.wire_replies import (
    BrokenStream,
    DelayedReply,
    ErrorReply,
    HeldReply,
    WireProtocol,
    anthropic_events,
    default_reply,
    error_body,
    openai_chunks,
)
from waitstate.testing.wire_responses import (
    RESPONSES_PATH,
    default_responses_reply,
    responses_error_body,
    responses_error_event,
    responses_events,
)

if TYPE_CHECKING:
    from waitstate.testing.wire_server import WireServer

logger = logging.getLogger("waitstate.testing.wire_server")

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


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    wire: WireServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away (a killed worker's keep-alive connection) is no error of
        # ours; anything else is printed as the base class does.
        if isinstance(sys.exc_info()[1], ConnectionError):
            logger.debug("client %s went away", client_address)
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps connections alive across calls, as with the real APIs.
    protocol_version = "HTTP/1.1"
    # Let an idle keep-alive connection's thread end on its own.
    timeout = 60
    server: HTTPServer

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
