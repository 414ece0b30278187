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
import logging
import threading
import time
from collections import deque
from dataclasses import replace
from types import TracebackType
from typing import Any, Self

from waitstate.testing.wire_background import BackgroundResponses
from waitstate.testing.wire_cache import PromptCache
from waitstate.testing.wire_http import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    Handler,
    HTTPServer,
    RecordedRequest,
)
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
    delayed,
    error,
    error_event,
    held,
    openai_chunks,
    openai_text,
    openai_tool_calls,
)
from waitstate.testing.wire_responses import (
    RESPONSES_PATH,
    ParamError,
    param_error,
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
        self._http = HTTPServer(("127.0.0.1", port), Handler)
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
