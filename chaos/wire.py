"""The model server of the suite: the wire server, plus a hang that ends on an event, not a clock.

`examples.wire_server.delayed(seconds)` answers after a fixed sleep, so a "hang past the model
timeout" races the worker: on a busy machine the retry may come after the sleep has ended, and
the check then judges the machine, not the run. Here the hung request is answered only once
its retry has arrived (the event the fault is about), or after HANG_LIMIT if it never does.
"""

from __future__ import annotations

import threading

from examples.wire_server import DelayedReply, RecordedRequest, Reply, WireServer

# A hung call whose retry never comes is answered after this (and the check reports it).
HANG_LIMIT = 60.0


class HangingWire(WireServer):
    """A WireServer whose `hang_until_retry(model)` holds that model's next call unanswered
    until the model's following call arrives."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self._hangs: dict[str, tuple[DelayedReply, threading.Event]] = {}
        self._hangs_lock = threading.Lock()

    def hang_until_retry(self, model: str) -> None:
        """The next call naming `model` hangs until another call naming it arrives."""
        # The base class queues replies per model; a reply object of our own marks the hang
        # (compared by identity), so the base class's queueing and recording are kept.
        marker = DelayedReply(0.0)
        with self._hangs_lock:
            self._hangs[model] = (marker, threading.Event())
        self.enqueue_for(model, marker)

    def _record_and_pop(self, request: RecordedRequest) -> Reply | None:
        # Overrides the base class's hook, called in each request's own thread: blocking here
        # holds only the hung request. (A hook of the wire server's own would be cleaner; see
        # the suite's report.)
        reply = super()._record_and_pop(request)
        model = request.body.get("model") if isinstance(request.body, dict) else None
        with self._hangs_lock:
            hang = self._hangs.get(model) if isinstance(model, str) else None
        if hang is None:
            return reply
        marker, retried = hang
        if reply is marker:
            retried.wait(HANG_LIMIT)
            return None  # then the default rule answers, as after `delayed`
        retried.set()
        return reply
