"""Heartbeats for activities that can run long, so that a worker lost under one (SIGKILLed, its
machine gone) is noticed within the activity's heartbeat timeout, not its start-to-close.

`pulse()` keeps the activity beating while its block runs: a side task heartbeats whenever
nothing else has for a third of the heartbeat timeout, so a call that waits in silence (an
unstreamed model call, a tool's request) is seen alive, and one shorter than that costs no
heartbeat at all. `progress()` is what a stream's chunks call: it beats at most that often too,
never per token. `beat(*details)` records details a later attempt reads back
(`activity.info().heartbeat_details`), at once; code under `pulse()` calls it rather than
`activity.heartbeat`, so the side task repeats the newest details and never sends none over
them. Details an earlier attempt recorded are kept until this attempt records its own.

The SDK sends at most one heartbeat per 80% of the timeout to the server (the rest are merged
into the next), so what a pulse costs the server is that one call, whatever the side task does.
An activity scheduled with no heartbeat timeout (a run's call from before it had one, a call
outside any run) gets no side task: nothing would be watching its beats.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from temporalio import activity

from waitstate.cancelling import ended

# Beats per heartbeat timeout: the side task's interval is a third of it, so a beat delayed by a
# busy event loop, or merged by the SDK into the next, still reaches the server in time.
BEATS_PER_TIMEOUT = 3
_now = time.monotonic  # seconds, for the intervals between beats


@dataclass
class _Pulse:
    interval: float  # seconds between beats
    details: tuple[Any, ...]
    last: float  # `_now()` at the latest beat (or at the pulse's start)


_CURRENT: ContextVar[_Pulse | None] = ContextVar("waitstate_pulse", default=None)


@contextlib.asynccontextmanager
async def pulse() -> AsyncIterator[None]:
    """Heartbeat the current activity while the block runs (see the module's docstring)."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return
    state = _Pulse(
        interval=timeout.total_seconds() / BEATS_PER_TIMEOUT,
        details=tuple(activity.info().heartbeat_details),
        last=_now(),
    )
    token = _CURRENT.set(state)
    side = asyncio.create_task(_beating(state))
    try:
        yield
    finally:
        side.cancel()
        _CURRENT.reset(token)
        if (err := await ended(side)) is not None:
            raise err


def beat(*details: Any) -> None:
    """Heartbeat now, recording `details` (under `pulse()`, what its side task repeats)."""
    state = _CURRENT.get()
    if state is not None:
        state.details = details
        state.last = _now()
    activity.heartbeat(*details)


def progress() -> None:
    """The activity is making progress (a stream's chunk came): heartbeat, unless it did less
    than the pulse's interval ago. Outside `pulse()`, nothing."""
    state = _CURRENT.get()
    if state is not None and _now() - state.last >= state.interval:
        beat(*state.details)


async def _beating(state: _Pulse) -> None:
    while True:
        await asyncio.sleep(max(state.last + state.interval - _now(), 0.0))
        if _now() - state.last >= state.interval:
            beat(*state.details)
