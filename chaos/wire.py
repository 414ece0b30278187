"""The model server of the suite: the wire server, plus a hang that ends on an event, not a clock.

`waitstate.testing.wire_server.delayed(seconds)` answers after a fixed sleep, so a "hang past
the model timeout" races the worker: on a busy machine the retry may come after the sleep has
ended, and the check then judges the machine, not the run. Here the hung request is answered
only once its retry has arrived (the event the fault is about), or after HANG_LIMIT if it never
does: the wire server's `held` reply.
"""

from __future__ import annotations

from waitstate.testing.wire_server import WireServer, held

# A hung call whose retry never comes is answered after this (and the check reports it).
HANG_LIMIT = 60.0


class HangingWire(WireServer):
    """A WireServer whose `hang_until_retry(model)` holds that model's next call unanswered
    until the model's following call arrives."""

    def hang_until_retry(self, model: str) -> None:
        """The next call naming `model` hangs until another call naming it arrives; then the
        default rule answers it, as after `delayed`."""
        self.enqueue_for(model, held(HANG_LIMIT))
