"""The gateway's side of runs' event streams: who may read them and how many at once (the
`EventDesk`), and one reading of a run's events for all its readers (its `Feed`): a thousand
people following a hundred runs cost the cluster a hundred long polls, not a thousand.

A run's `Feed` reads its chain once (`RunEvents.follow`), keeps what it read (up to
`MAX_KEPT` events), and hands each event to every reader. A reader joins with where it is: at
the feed's start, or after an event the feed kept, and gets what it missed, then each event as
it comes. A reader the feed cannot serve (resuming after an event it never read or no longer
keeps) reads the run alone, as before feeds existed. A reader that falls `MAX_BEHIND` events
behind is let go (its stream ends; it resumes with `Last-Event-ID`): one slow connection holds
neither the feed nor the gateway's memory. The feed stops with its last reader.

A run's model text as it is written (its deltas, `Feeds.publish`) goes to the readers its feed
has at that moment, and is neither kept nor read from history: a reader that joins or resumes
later never gets it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from pydantic import BaseModel, Field
from temporalio.client import Client

from waitstate.auth.operators import OperatorKeys
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import Position, RunEvent, RunEvents

if TYPE_CHECKING:
    from waitstate.settings import Settings

MAX_KEPT = 10_000  # events a feed keeps for readers who join late
MAX_BEHIND = 1_000  # events a reader may have waiting before it is let go
# How often a feed with readers looks for its run's retried calls while a call is open.
RETRY_LOOK_SECONDS = 1.0
# What an event's kind is when a model or tool call starts, and when it ends, in any way.
_CALLS = ("model", "tool")
_CALL_ENDS = ("ended", "failed", "timed_out", "canceled")

_END = None  # what a reader's queue gets when the feed ends, or lets it go

log = logging.getLogger("waitstate.gateway.feeds")


class ModelDelta(BaseModel):
    """A piece of a model's answer as it is written: for the readers of the moment, never kept
    (it has no id, so a reader never resumes after one)."""

    kind: Literal["model.delta"] = "model.delta"
    turn: int | None = Field(description="The run's turn the model call is for.")
    call: str = Field(description="The model call: its activity and attempt (`<id>.<attempt>`).")
    text: str = Field(description="The text written since the call's previous delta.")
    at: datetime


class CallRetry(BaseModel):
    """A model or tool call whose attempt failed, tried again: for the readers of the moment,
    never kept (it has no id). Temporal writes no event for it until the call ends: the feed
    looks at the run's pending calls while one is open (`RETRY_LOOK_SECONDS`)."""

    kind: Literal["retry"] = "retry"
    call: str = Field(description="What is retried: `model call` or `tool call`.")
    activity_id: str
    attempt: int = Field(description="The attempt under way or to come: 2 is the first retry.")
    maximum_attempts: int | None = Field(description="None: no limit but the call's timeout.")
    error_type: str = Field(
        description="What the last attempt failed with: its error's type, or `timeout`; "
        "never the error's text (`watch` shows that to operators)."
    )
    at: datetime


Read = RunEvent | ModelDelta | CallRetry  # what a feed's reader gets
Ephemeral = (ModelDelta, CallRetry)  # what a reader gets with no id: never kept, never resumed


class Feed:
    """The events of one run's chain, read once from `origin` on, for every reader."""

    def __init__(self, events: RunEvents, run_id: str, origin: Position) -> None:
        self.run_id = run_id
        self.origin: Position | None = origin  # None: no longer kept from its start
        self._kept: list[RunEvent] = []
        self._index: dict[str, int] = {}  # event id -> its place in `_kept`
        self._readers: set[asyncio.Queue[Read | None]] = set()
        self._ended = False
        self._calls_open = 0  # model and tool calls started and not ended, as read
        self._a_call_is_open = asyncio.Event()
        self._reading = asyncio.create_task(self._read(events))
        self._retries = asyncio.create_task(self._look_for_retries(events))

    @property
    def readers(self) -> int:
        return len(self._readers)

    def missed(self, after: Position) -> list[RunEvent] | None:
        """What a reader at `after` has not had yet, or None if this feed cannot tell."""
        if after == self.origin:
            return list(self._kept)
        place = self._index.get(f"{after.run}.{after.event_id}")
        return None if place is None else self._kept[place + 1 :]

    def join(self, after: Position) -> asyncio.Queue[Read | None] | None:
        """A queue of the events after `after`, then of each one as it comes, and `_END`; or
        None if this feed cannot serve a reader there."""
        missed = self.missed(after)
        if missed is None:
            return None
        queue: asyncio.Queue[Read | None] = asyncio.Queue()
        for event in missed:
            queue.put_nowait(event)
        if self._ended:
            queue.put_nowait(_END)
        else:
            self._readers.add(queue)
        return queue

    def leave(self, queue: asyncio.Queue[Read | None]) -> None:
        self._readers.discard(queue)

    def stop(self) -> None:
        self._reading.cancel()
        self._retries.cancel()

    def publish(self, delta: ModelDelta) -> int:
        """Hand `delta` to the readers of the moment (a reader too far behind is let go, as
        with events); returns how many got it."""
        self._hand(delta)
        return len(self._readers)

    def _hand(self, read: Read) -> None:
        for queue in list(self._readers):
            if queue.qsize() >= MAX_BEHIND:
                self._readers.discard(queue)  # let go: it resumes on its own
                queue.put_nowait(_END)
            else:
                queue.put_nowait(read)

    async def _read(self, events: RunEvents) -> None:
        assert self.origin is not None
        try:
            async for event in events.follow(self.run_id, self.origin):
                self._keep(event)
                self._count_calls(event.kind)
                self._hand(event)
        except Exception:  # a bug: its readers' streams end, and they resume on their own
            log.exception("reading the events of %s failed", self.run_id)
        finally:
            self._ended = True
            self._retries.cancel()
            for queue in self._readers:
                queue.put_nowait(_END)
            self._readers.clear()

    def _count_calls(self, kind: str) -> None:
        what, _, phase = kind.partition(".")
        if kind in ("run.started", "run.continued"):
            self._calls_open = 0  # a run's calls end with it
        elif what in _CALLS and phase == "started":
            self._calls_open += 1
        elif what in _CALLS and phase in _CALL_ENDS:
            self._calls_open = max(0, self._calls_open - 1)
        if self._calls_open:
            self._a_call_is_open.set()
        else:
            self._a_call_is_open.clear()

    async def _look_for_retries(self, events: RunEvents) -> None:
        """While the feed has readers and a call is open, look at the run's pending calls
        every `RETRY_LOOK_SECONDS`, and hand each new attempt of a failing one to the readers:
        a run that waits, or whose calls answer at once, is never looked at."""
        shown: set[tuple[str, int]] = set()  # (activity id, attempt)
        while True:
            await self._a_call_is_open.wait()  # an idle feed costs nothing
            await asyncio.sleep(RETRY_LOOK_SECONDS)
            if self._calls_open == 0 or not self._readers:
                continue
            for retry in await events.retries(self.run_id):
                if (retry.activity_id, retry.attempt) in shown:
                    continue
                shown.add((retry.activity_id, retry.attempt))
                self._hand(
                    CallRetry(
                        call=retry.call,
                        activity_id=retry.activity_id,
                        attempt=retry.attempt,
                        maximum_attempts=retry.maximum_attempts,
                        error_type=retry.error_type,
                        at=datetime.now(UTC),
                    )
                )

    def _keep(self, event: RunEvent) -> None:
        if len(self._kept) >= MAX_KEPT:
            # The older half goes: readers that join before it are served alone.
            self._kept = self._kept[MAX_KEPT // 2 :]
            self._index = {kept.id: place for place, kept in enumerate(self._kept)}
            self.origin = None
        self._index[event.id] = len(self._kept)
        self._kept.append(event)


class Feeds:
    """The gateway's feeds, one per run being read; each stops with its last reader."""

    def __init__(self, events: RunEvents) -> None:
        self._events = events
        self._feeds: dict[str, Feed] = {}

    def __len__(self) -> int:
        return len(self._feeds)

    def publish(self, run_id: str, delta: ModelDelta) -> int:
        """Hand `delta` to the current readers of `run_id`'s feed; returns how many got it
        (none when nobody reads the run: the delta is dropped)."""
        feed = self._feeds.get(run_id)
        return 0 if feed is None else feed.publish(delta)

    async def read(self, run_id: str, start: Position) -> AsyncIterator[Read]:
        """The events of `run_id` after `start`, from the run's feed if it can serve them, or
        read alone if not; with the feed, the run's deltas as they are published, between
        them."""
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = Feed(self._events, run_id, start)
        queue = feed.join(start)
        if queue is None:
            async for event in self._events.follow(run_id, start):
                yield event
            return
        try:
            while True:
                got = await queue.get()
                if got is _END:
                    return
                yield got
        finally:
            feed.leave(queue)
            if feed.readers == 0 and self._feeds.get(run_id) is feed:
                del self._feeds[run_id]
                feed.stop()


DEFAULT_VIEW_LIFETIME = timedelta(days=7)
DEFAULT_MAX_STREAMS = 2_000


@dataclass
class EventDesk:
    """What the event routes need: the runs' events, who may read them (a run's view token,
    or an operator key), and how many streams this gateway holds open at most.

    Attributes:
        events: Reads the runs' events.
        tokens: Mints and verifies view tokens.
        operators: Operator keys: they read any run's events and hand out view links.
        gateway_url: Where view links point (the timeline page, and the events).
        view_lifetime: How long a view link handed out now stays valid.
        max_streams: Streams open at once; one more is refused (503) until one closes.
    """

    events: RunEvents
    tokens: ResumeTokens
    operators: OperatorKeys
    gateway_url: str
    view_lifetime: timedelta = DEFAULT_VIEW_LIFETIME
    max_streams: int = DEFAULT_MAX_STREAMS
    open_streams: int = field(default=0, init=False)
    # One reading of a run for all its readers.
    feeds: Feeds = field(init=False, repr=False)
    # Set when the gateway stops: its streams end (their readers resume at another).
    closing: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        self.feeds = Feeds(self.events)

    @classmethod
    def from_settings(cls, client: Client, tokens: ResumeTokens, settings: Settings) -> EventDesk:
        """The desk of the gateway process: its operator keys, and links to its URL."""
        return cls(
            RunEvents(client), tokens, OperatorKeys(settings.operator_keys), settings.gateway_url
        )

    def view_link(self, run_id: str, token: str) -> str:
        """The URL a view token opens a run's timeline at: the page that follows its events
        (`routes.timeline`)."""
        return f"{self.gateway_url}/pages/runs/{quote(run_id, safe='')}?token={token}"

    def events_link(self, run_id: str, token: str) -> str:
        """The URL a view token reads a run's events at, as server-sent events."""
        return f"{self.gateway_url}/v1/runs/{quote(run_id, safe='')}/events?token={token}"
