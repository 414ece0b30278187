"""Background responses on the wire server's Responses API, as OpenAI serves them: a create with
`"background": true` is answered at once, `queued`, and the response is worked on meanwhile.

- `POST /v1/responses` with `"background": true`: the scripted reply (or the default rule's)
  becomes the response's end; the answer is the response `queued`, without output or usage
  (`completed`, the reply itself, when `WireServer.background_seconds` is 0).
- `GET /v1/responses/{id}`: `in_progress` until `WireServer.background_seconds` have passed
  since the create, then the response `completed` (the scripted reply, as a foreground call
  gets it, with `background` and `store` true); `cancelled` once cancelled; 404 if unknown.
- `POST /v1/responses/{id}/cancel`: a response not yet completed becomes `cancelled`; the
  answer is the response as it is then (cancelling one that ended changes nothing).

Every request is recorded with the others (`WireServer.requests`, with its method), so a test
counts the creates, retrieves and cancels.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

RESPONSE_PREFIX = "/v1/responses/"
CANCEL_SUFFIX = "/cancel"
# Statuses of a response still being worked on.
PENDING = ("queued", "in_progress")


@dataclass
class _Background:
    end: dict[str, Any]  # the response, completed
    ready_at: float  # time.monotonic() when it completes
    status: str = "queued"


class BackgroundResponses:
    """The background responses created so far, each completing `seconds` after its create."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._responses: dict[str, _Background] = {}

    def start(self, reply: dict[str, Any]) -> dict[str, Any]:
        """Keep `reply` as a new background response's end: the body the create answers."""
        end = {**reply, "background": True, "store": True}
        # No time to take: completed by the time the create is answered.
        status = "queued" if self.seconds > 0 else "completed"
        with self._lock:
            ready_at = time.monotonic() + self.seconds
            self._responses[end["id"]] = _Background(end, ready_at, status)
        return _as_of(end, status)

    def retrieve(self, response_id: str) -> dict[str, Any] | None:
        """The response as it is now (None: no such response)."""
        with self._lock:
            response = self._responses.get(response_id)
            if response is None:
                return None
            if response.status in PENDING:
                done = time.monotonic() >= response.ready_at
                response.status = "completed" if done else "in_progress"
            return _as_of(response.end, response.status)

    def cancel(self, response_id: str) -> dict[str, Any] | None:
        """Cancel the response unless it ended: the response as it is then (None: no such
        response)."""
        with self._lock:
            response = self._responses.get(response_id)
            if response is None:
                return None
            if response.status in PENDING and time.monotonic() < response.ready_at:
                response.status = "cancelled"
        return self.retrieve(response_id)


def response_id(path: str) -> tuple[str, bool] | None:
    """The response id a path names, and whether it is a cancel (None: not such a path)."""
    if not path.startswith(RESPONSE_PREFIX):
        return None
    rest = path.removeprefix(RESPONSE_PREFIX).partition("?")[0]
    cancel = rest.endswith(CANCEL_SUFFIX)
    rest = rest.removesuffix(CANCEL_SUFFIX)
    return (rest, cancel) if rest and "/" not in rest else None


def _as_of(end: dict[str, Any], status: str) -> dict[str, Any]:
    if status == "completed":
        return end
    return {**end, "status": status, "output": [], "usage": None}
